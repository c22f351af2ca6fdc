#!/usr/bin/env bash
# Install Kiln and what its tests need on a fresh Debian machine with Python >= 3.11.
# Safe to run again: every step is a no-op when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
want_dev=${1:-}

pip_install() { "$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "$@"; }

if [ "$want_dev" = "--dev" ]; then
  # The quantization tests run ModelOpt on CPU. torch comes first and exactly pinned: this pin
  # resolves to the CPU build; an unpinned torch (or one pulled in by ModelOpt) would bring CUDA.
  pip_install torch==2.13.0
  pip_install -e '.[test,quantize]'
else
  pip_install -e .
fi
