#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
# CI runs more property-test examples than a developer's default run.
export KILN_HYPOTHESIS_PROFILE=${KILN_HYPOTHESIS_PROFILE:-ci}
python3 -m compiler schema --check
exec python3 -m pytest -q "$@"
