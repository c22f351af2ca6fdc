#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs (into .venv, see
# scripts/install.sh), starts the real services the tests use (Docker Engine; reused when already
# running), runs pytest, stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(bash scripts/services.sh)
cleanup() { for pid in $started; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
bash scripts/install.sh --dev
venv=${KILN_VENV:-.venv}
[[ $venv == /* ]] || venv="$PWD/$venv"  # absolute: wheel_smoke.sh runs it from other directories
py="$venv/bin/python"
# CI runs more property-test examples than a developer's default run.
export KILN_HYPOTHESIS_PROFILE=${KILN_HYPOTHESIS_PROFILE:-ci}
"$py" -m compiler schema --check
# The wheel, installed in a fresh venv, runs the quickstart from its packaged templates and data.
PYTHON="$py" bash scripts/wheel_smoke.sh
# Two workers, each taking whole test files (module fixtures stay in one process): the suite
# waits on real servers, Docker and subprocesses as much as it computes. KILN_TEST_WORKERS=0 runs
# it in one process.
"$py" -m pytest -q -n "${KILN_TEST_WORKERS:-2}" --dist loadfile "$@"
