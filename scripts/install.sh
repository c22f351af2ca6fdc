#!/usr/bin/env bash
# Install Kiln into the project's virtual environment (.venv, or $KILN_VENV), never into the
# interpreter that created it: Debian's python3 refuses that (PEP 668, externally managed) and
# elsewhere it would change the user's own packages. Run Kiln as .venv/bin/kiln, or
# `source .venv/bin/activate` first.
#   (no flag)     Kiln and what quantizing on this machine needs (torch, transformers, ModelOpt)
#   --dev         the same, plus what the tests need (Ray among it)
#   --distributed the same as no flag, plus Ray, for `kiln build --executor ray://HOST:PORT`
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
  --dev) extras='[test,quantize,distributed]' ;;
  --distributed) extras='[quantize,distributed]' ;;
  '') extras='[quantize]' ;;
  *) echo "usage: $0 [--dev | --distributed | --no-quantize]" >&2; exit 2 ;;
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
      (  # one apt at a time: scripts/test.sh runs scripts/services.sh (apt too) beside this
        flock 9
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
      ) 9>"${TMPDIR:-/tmp}/kiln-apt.lock"
    fi
    make_venv || { rm -rf "$VENV"; say "$PY cannot create a virtual environment (on Debian: apt-get install python3-venv)"; exit 1; }
  fi
fi

pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
if [ "$mode" != --no-quantize ]; then
  # torch comes first and exactly pinned: this pin resolves to the CPU build on machines without
  # CUDA; an unpinned torch (or one pulled in by ModelOpt) would bring gigabytes of CUDA libraries.
  # It is the torch compiler/catalog/data/checkpoint_config.json names for the ModelOpt pin (the
  # quantize action refuses another); the generated CI workflows install the same pin
  # (compiler/gitops/ci.py: TORCH_PIN). pip installs it, so that pip's own configuration (an index
  # or a directory that holds the CPU build) is honoured; its files are byte-compiled below, on
  # every core instead of pip's one (like pip, ignoring the few files written for a newer Python),
  # while the rest downloads.
  pip_install --no-compile torch==2.13.0
  "$VENV/bin/python" -m compileall -q -j 0 "$site/torch" >/dev/null 2>&1 &
  compiling=$!
fi
# The rest goes in with uv when it can be had: the same packages from the same index (PyPI),
# downloaded and byte-compiled in parallel, in a fraction of pip's time. uv reads no pip.conf, so
# KILN_INSTALLER=pip keeps to pip (a private index configured for pip only); pip is also the
# fallback whenever uv cannot be installed or fails.
installed=''
if [ "${KILN_INSTALLER:-uv}" = uv ] && pip_install uv >/dev/null 2>&1; then
  if "$VENV/bin/python" -m uv pip install --quiet --python "$VENV/bin/python" --compile-bytecode -e ".$extras"; then
    installed=uv
  else
    say "uv could not install Kiln; trying pip"
  fi
fi
[ -n "$installed" ] || pip_install -e ".$extras"
if [ -n "${compiling:-}" ]; then wait "$compiling" || true; fi
say "Kiln is in $VENV: run $VENV/bin/kiln, or \`source $VENV/bin/activate\` and then kiln"
