#!/usr/bin/env bash
# Install Kiln into the project's virtual environment (.venv, or $KILN_VENV), never into the
# interpreter that created it: Debian's python3 refuses that (PEP 668, externally managed) and
# elsewhere it would change the user's own packages. Run Kiln as .venv/bin/kiln, or
# `source .venv/bin/activate` first.
#   (no flag)     Kiln and what quantizing on this machine needs (torch, transformers, ModelOpt)
#   --dev         the same, plus what the tests need
#   --no-quantize Kiln alone: validate, plan, and build what needs no torch (quantization is deferred)
# PYTHON picks the interpreter the environment is made from (default python3, 3.11 or newer).
# Safe to run again: every step is a no-op when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${KILN_VENV:-.venv}
mode=${1:-}
case "$mode" in
  --no-quantize) extras='' ;;
  --dev) extras='[test,quantize]' ;;
  '') extras='[quantize]' ;;
  *) echo "usage: $0 [--dev | --no-quantize]" >&2; exit 2 ;;
esac

say() { echo "install.sh: $*" >&2; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || { say "$PY is not Python 3.11 or newer (set PYTHON to one that is)"; exit 1; }

make_venv() { "$PY" -m venv "$VENV" >/dev/null 2>&1; }
if [ ! -x "$VENV/bin/python" ]; then
  if ! make_venv; then
    rm -rf "$VENV"
    # Debian ships venv (and the pip it seeds) as a package of its own.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing Debian's python3-venv"
      apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    fi
    make_venv || { rm -rf "$VENV"; say "$PY cannot create a virtual environment (on Debian: apt-get install python3-venv)"; exit 1; }
  fi
fi

pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
if [ "$mode" != --no-quantize ]; then
  # torch comes first and exactly pinned: this pin resolves to the CPU build on machines without
  # CUDA; an unpinned torch (or one pulled in by ModelOpt) would bring gigabytes of CUDA libraries.
  # It is the torch compiler/catalog/data/checkpoint_config.json names for the ModelOpt pin (the
  # quantize action refuses another); the generated CI workflows install the same pin
  # (compiler/gitops/ci.py: TORCH_PIN).
  pip_install torch==2.13.0
fi
pip_install -e ".$extras"
say "Kiln is in $VENV: run $VENV/bin/kiln, or \`source $VENV/bin/activate\` and then kiln"
