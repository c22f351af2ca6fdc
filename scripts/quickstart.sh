#!/usr/bin/env bash
# Kiln's main job on the quickstart example, from a fresh machine: install, validate, plan, build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
kiln validate examples/quickstart/kiln.yaml
kiln plan examples/quickstart/kiln.yaml
kiln build examples/quickstart/kiln.yaml --manifest .kiln/releases/quickstart.json
kiln store verify
