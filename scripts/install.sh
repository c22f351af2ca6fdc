#!/usr/bin/env bash
# Install Kiln and what its tests need on a fresh Debian machine with Python >= 3.11.
# Safe to run again: every step is a no-op when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
want_dev=${1:-}

pip_install() { "$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "$@"; }

if [ "$want_dev" = "--dev" ]; then
  pip_install -e '.[test]'
else
  pip_install -e .
fi
