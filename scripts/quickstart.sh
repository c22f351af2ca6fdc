#!/usr/bin/env bash
# Kiln's main job on the quickstart example, from a fresh machine: install (into .venv, see
# scripts/install.sh), validate, plan, build, and export the artifacts to a directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
kiln=("${KILN_VENV:-.venv}/bin/kiln")
spec=examples/quickstart/kiln.yaml
out=.kiln/out/quickstart
"${kiln[@]}" validate "$spec"
"${kiln[@]}" plan "$spec"
"${kiln[@]}" build "$spec" --manifest .kiln/releases/quickstart.json
"${kiln[@]}" store verify
"${kiln[@]}" export "$spec" --to "$out"
echo
echo "quickstart: the release manifest is .kiln/releases/quickstart.json; every artifact is under $out/"
echo "quickstart: e.g. $out/host-script/dev-h100/provision.sh and the Triton repository $out/triton-repo/dev-h100/"
