#!/usr/bin/env bash
# Install Kiln on a fresh Debian machine with Python >= 3.11.
#   (no flag)     Kiln and what quantizing on this machine needs (torch, transformers, ModelOpt)
#   --dev         the same, plus what the tests need
#   --no-quantize Kiln alone: validate, plan, and build what needs no torch (quantization is deferred)
# Safe to run again: every step is a no-op when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
mode=${1:-}

pip_install() { "$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "$@"; }

case "$mode" in
  --no-quantize) pip_install -e . ; exit 0 ;;
  --dev) extras='test,quantize' ;;
  '') extras='quantize' ;;
  *) echo "usage: $0 [--dev | --no-quantize]" >&2; exit 2 ;;
esac
# torch comes first and exactly pinned: this pin resolves to the CPU build on machines without
# CUDA; an unpinned torch (or one pulled in by ModelOpt) would bring gigabytes of CUDA libraries.
# It is the torch compiler/catalog/data/checkpoint_config.json names for the ModelOpt pin (the
# quantize action refuses another).
pip_install torch==2.13.0
pip_install -e ".[$extras]"
