#!/usr/bin/env bash
# Kiln's main job on the quickstart example, from a fresh machine: install (into .venv, see
# scripts/install.sh), validate, plan, build, and export the artifacts to a directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
kiln=("${KILN_VENV:-.venv}/bin/kiln")
spec=examples/quickstart/kiln.yaml
out=.kiln/out/quickstart
# The store at the checkout's root, also where it is no git work tree (kiln would otherwise keep it
# beside the spec there, and `kiln store verify` would look in the current directory).
store=.kiln/store
"${kiln[@]}" validate "$spec"
"${kiln[@]}" plan "$spec" --store "$store"
"${kiln[@]}" build "$spec" --store "$store" --manifest .kiln/releases/quickstart.json
"${kiln[@]}" store verify --store "$store"
"${kiln[@]}" export "$spec" --store "$store" --to "$out"
echo
echo "quickstart: the release manifest is .kiln/releases/quickstart.json; every artifact is under $out/"
echo "quickstart: e.g. $out/host-script/dev-h100/provision.sh and the Triton repository $out/triton-repo/dev-h100/"
