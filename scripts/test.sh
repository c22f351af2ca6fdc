#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs (into .venv, see
# scripts/install.sh), starts the real services the tests use (Docker Engine; reused when already
# running), runs pytest, stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# The services (Debian packages, Docker Engine) and Kiln's install (PyPI) mostly wait on the
# network, so they run side by side; services.sh prints the PIDs it started, for cleanup to stop.
services_out=$(mktemp)
services_job=''
warm_job=''
cleanup() {
  if [ -n "$services_job" ]; then wait "$services_job" 2>/dev/null || true; fi
  if [ -n "$warm_job" ]; then wait "$warm_job" 2>/dev/null || true; fi
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$services_out"
  rm -f "$services_out"
}
trap cleanup EXIT
bash scripts/services.sh >"$services_out" &
services_job=$!
bash scripts/install.sh --dev
wait "$services_job"
services_job=''
venv=${KILN_VENV:-.venv}
[[ $venv == /* ]] || venv="$PWD/$venv"  # absolute: wheel_smoke.sh runs it from other directories
py="$venv/bin/python"
# CI runs more property-test examples than a developer's default run.
export KILN_HYPOTHESIS_PROFILE=${KILN_HYPOTHESIS_PROFILE:-ci}
# Compiled once here, not in every process: the suite starts Kiln (and the stand-ins under tests/)
# in hundreds of subprocesses, which would each compile them again where PYTHONDONTWRITEBYTECODE
# is set (it is on some CI images); a fifth of a second each.
# Not the data trees: templates, golden files and cases are files the tests compare, not modules.
"$py" -m compileall -q -j 0 -x '/(templates|golden|cases|data)/' compiler tests >/dev/null
"$py" -m compiler schema --check
# The wheel smoke test keeps one core busy; on the other, what the tests would make in their first
# minutes (pytest's rewritten modules, the tests' own venvs: tests/warm_caches.py). It may go on into
# the run: a test that needs a venv waits for it under the same lock, or makes it itself.
"$py" -m tests.warm_caches &
warm_job=$!
# The wheel, installed in a fresh venv, runs the quickstart from its packaged templates and data.
PYTHON="$py" bash scripts/wheel_smoke.sh
# Three workers on two cores, each taking whole test files (module fixtures stay in one process):
# the suite waits on real servers, Docker and subprocesses as much as it computes (on an idle 2-core
# machine, pytest 4 min 33 s on three workers, 5 min 21 s on two). KILN_TEST_WORKERS=0 runs
# it in one process. --no-loadscope-reorder: files go out in collection order, the slowest first
# (tests/conftest.py: SLOW_FILES), not xdist's default of the files with the most tests first.
"$py" -m pytest -q -n "${KILN_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
