#!/usr/bin/env bash
# Kiln as a user gets it: build the wheel, install it (with its dependencies from PyPI, no extras)
# into a fresh virtual environment, and run the quickstart from a directory outside the source
# tree, so only the installed package (its templates and data files included) can be imported.
# Checks validate, plan, catalog, init, and a build of everything that needs neither torch nor a
# GPU: the host script and the Triton repository must come out of the packaged templates exactly
# as they do from the source tree. scripts/test.sh runs it; uv's (or pip's) cache keeps reruns quick.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
start=$SECONDS

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() { echo "wheel-smoke: [$((SECONDS - start))s] $*"; }
fail() { echo "wheel-smoke: FAILED: $*" >&2; exit 1; }
pip_quiet=(--quiet --disable-pip-version-check)

# A copy of what the wheel is built from (no __pycache__, no stale build/ of the checkout).
mkdir "$tmp/src"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml README.md compiler | tar -C "$tmp/src" -xf -
isolation=()
if "$PY" -c 'import sys, setuptools; sys.exit(int(setuptools.__version__.split(".")[0]) < 68)' 2>/dev/null; then
  isolation=(--no-build-isolation)  # pyproject's build requirement is already here
fi
step "building the wheel"
"$PY" -m pip wheel "${pip_quiet[@]}" --no-deps "${isolation[@]}" -w "$tmp/dist" "$tmp/src" >/dev/null
wheel=$(ls "$tmp"/dist/kiln_compiler-*.whl)

step "installing $(basename "$wheel") into a fresh venv"
V="$tmp/venv/bin"
# No byte-compiling of the dependencies (numpy and grpcio alone take seconds); Kiln itself is
# compiled as pip would, which also puts __pycache__ next to the Triton model files it ships.
if "$PY" -m uv --version >/dev/null 2>&1; then  # scripts/install.sh puts uv next to Kiln: seconds, not tens
  "$PY" -m venv --without-pip "$tmp/venv"
  "$PY" -m uv pip install --quiet --python "$V/python" "$wheel"
else
  if "$PY" -m pip --python "$PY" --version >/dev/null 2>&1; then  # pip >= 22.3 installs into another env
    "$PY" -m venv --without-pip "$tmp/venv"  # seeding the venv with its own pip takes longer than the test
    pip=("$PY" -m pip --python "$V/python")
  else
    "$PY" -m venv "$tmp/venv"
    pip=("$V/python" -m pip)
  fi
  "${pip[@]}" install "${pip_quiet[@]}" --root-user-action=ignore --no-compile "$wheel"
fi
"$V/python" -m compileall -q "$("$V/python" -c 'import compiler, os; print(os.path.dirname(compiler.__file__))')" >/dev/null

# From here on: outside the source tree, with nothing of it on the path.
unset PYTHONPATH
export KILN_STORE="$tmp/store"
mkdir "$tmp/specs"
tar -C "$ROOT/examples" --exclude=.kiln -cf - quickstart | tar -C "$tmp/specs" -xf -
cd "$tmp/specs/quickstart"
where=$("$V/python" -c 'import compiler; print(compiler.__file__)')
[[ $where == "$tmp/venv/"* ]] || fail "compiler is imported from $where, not from the venv"

run() {  # run EXPECTED_RC CMD...: the command's output is shown only when its exit code is wrong
  local want=$1; shift
  local rc=0
  "$@" >"$tmp/out" 2>&1 || rc=$?
  if [[ $rc != "$want" ]]; then cat "$tmp/out" >&2; fail "$* exited $rc (expected $want)"; fi
}
step "kiln validate / plan / catalog / init"
run 0 "$V/kiln" validate kiln.yaml
run 0 "$V/kiln" plan kiln.yaml
run 0 "$V/kiln" catalog
run 0 "$V/kiln" catalog --models
run 0 "$V/kiln" catalog --formats
mkdir "$tmp/repo" && cp -r . "$tmp/repo/deploy"
# A wheel records no repository: the workflows' Kiln source is given (kilnsource.py).
run 0 "$V/kiln" init "$tmp/repo/deploy/kiln.yaml" --dir "$tmp/repo" --registry registry.example/kiln \
  --kiln-repo https://git.example/kiln --kiln-commit 0123456789abcdef0123456789abcdef01234567
[[ -s $tmp/repo/.github/workflows/kiln-plan.yml && -s $tmp/repo/.github/workflows/kiln-release.yml ]] \
  || fail "kiln init wrote no workflows"

step "kiln build (everything but quantization and its quality gates)"
build=(build kiln.yaml --skip 'quantize*' --skip 'quality-gate*' --allow-partial --quiet)
run 0 "$V/kiln" "${build[@]}" --manifest "$tmp/installed.json"
run 0 "$V/kiln" store verify
# The same build from the source tree: the packaged templates must give the same keys and outputs.
run 0 env PYTHONPATH="$ROOT" "$PY" -m compiler "${build[@]}" --store "$tmp/store-src" --manifest "$tmp/source.json"

"$V/python" - "$tmp" "$ROOT" <<'EOF'
import json
import sys
from pathlib import Path

from compiler.store.local import LocalStore

tmp, root = Path(sys.argv[1]), Path(sys.argv[2])
installed = {a["id"]: a for a in json.loads((tmp / "installed.json").read_text())["artifacts"]}
source = {a["id"]: a for a in json.loads((tmp / "source.json").read_text())["artifacts"]}
problems = []
for kind in ("host-script", "triton-repo"):
    ids = sorted(i for i, a in installed.items() if a["kind"] == kind)
    if not ids:
        problems.append(f"no {kind} action in the build")
    for i in ids:
        got, want = installed[i], source.get(i, {})
        if got["tree"] is None:
            problems.append(f"{i} was not built")
        elif (got["key"], got["tree"]) != (want.get("key"), want.get("tree")):
            problems.append(f"{i}: key/tree {got['key']}/{got['tree']} differ from the source tree's "
                            f"{want.get('key')}/{want.get('tree')}")
if problems:
    sys.exit("wheel-smoke: FAILED:\n  " + "\n  ".join(problems))
store, out = LocalStore(tmp / "store"), tmp / "out-trees"
store.materialize(installed["host-script/dev-h100"]["tree"], out / "host")
store.materialize(installed["triton-repo/dev-h100"]["tree"], out / "repo")
script = (out / "host" / "provision.sh").read_text()
assert script.startswith("#!/usr/bin/env bash\n"), script[:80]
model_py = (root / "compiler" / "templates" / "triton" / "llmapi" / "model.py").read_bytes()
assert (out / "repo" / "tiny" / "1" / "model.py").read_bytes() == model_py
assert (out / "repo" / "tiny" / "config.pbtxt").is_file()
EOF
step "ok ($((SECONDS - start))s)"
