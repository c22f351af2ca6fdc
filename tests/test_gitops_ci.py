"""The CI workflows `kiln init` installs: valid GitHub Actions syntax (GitHub's workflow schema as
vendored by check-jsonschema), consistent job/step/output references, shell that shellcheck passes,
and kiln command lines that kiln's own parser accepts."""

from __future__ import annotations

import importlib.resources
import io
import json
import re
import shlex
import shutil
import sys
import subprocess
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.cli import _parser, main
from compiler.gitops.ci import InitConflict, render_workflows
from compiler.gitops.kilnsource import KilnSource

ROOT = Path(__file__).resolve().parents[1]
SPEC = Path(__file__).parent / "golden" / "plan" / "calibration-and-mig" / "spec"
KILN_REPO, KILN_COMMIT = "https://git.example/acme/kiln", "0123456789abcdef0123456789abcdef01234567"
SOURCE = ["--kiln-repo", KILN_REPO, "--kiln-commit", KILN_COMMIT]
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
CONTEXTS = {"github", "env", "secrets", "vars", "needs", "steps", "matrix", "job", "runner", "strategy", "inputs"}
FUNCTIONS = {"always", "success", "failure", "cancelled", "fromJSON", "toJSON", "contains", "startsWith",
             "endsWith", "format", "join", "hashFiles"}


@pytest.fixture
def installed(tmp_path: Path, capsys) -> dict[str, str]:
    shutil.copytree(SPEC, tmp_path / "deploy")
    assert main(["init", str(tmp_path / "deploy" / "kiln.yaml"), "--dir", str(tmp_path),
                 "--registry", "127.0.0.1:5000/team", *SOURCE]) == 0
    assert capsys.readouterr().out.count("wrote: ") == 5  # two workflows, actionlint.yaml, kiln-builders.yml, .gitignore
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((tmp_path / ".github" / "workflows").iterdir())}


def _load(text: str) -> dict:
    return YAML(typ="safe").load(io.StringIO(text))  # YAML 1.2: `on` stays a string key


def _schema() -> dict:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads((vendor / "github-workflows.json").read_text(encoding="utf-8"))


def test_init_installs_two_workflows_valid_against_githubs_schema(installed) -> None:
    assert set(installed) == {"kiln-plan.yml", "kiln-release.yml"}
    validator = jsonschema.Draft7Validator(_schema())
    for name, text in installed.items():
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_load(text))]
        assert errors == [], name


@pytest.mark.parametrize("breakage", ["step key", "runs-on", "on"])
def test_the_schema_check_catches_a_broken_workflow(installed, breakage: str) -> None:
    doc = _load(installed["kiln-release.yml"])
    if breakage == "step key":
        step = doc["jobs"]["gpu"]["steps"][1]
        step["width"] = step.pop("with")
    elif breakage == "runs-on":
        del doc["jobs"]["cpu"]["runs-on"]
    else:
        doc["on"]["push"]["branch"] = doc["on"]["push"].pop("branches")
    assert not jsonschema.Draft7Validator(_schema()).is_valid(doc)


def _expressions(value) -> list[str]:
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in _expressions(k) + _expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in _expressions(v)]
    return [m.strip() for m in EXPR.findall(value)] if isinstance(value, str) else []


def test_jobs_steps_and_outputs_referenced_exist(installed) -> None:
    for name, text in installed.items():
        jobs = _load(text)["jobs"]
        for job_id, job in jobs.items():
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            assert set(needs) <= set(jobs), (name, job_id)
            step_ids = {s["id"] for s in job["steps"] if "id" in s}
            exprs = _expressions(job) + ([job["if"]] if "if" in job and "${{" not in job["if"] else [])
            for expr in exprs:
                for root in re.findall(r"(?<![\w.'])([A-Za-z_][\w-]*)(?=[.(\[])", expr):
                    assert root in CONTEXTS | FUNCTIONS, (name, job_id, expr)
                for dep, output in re.findall(r"needs\.([\w-]+)\.outputs\.([\w-]+)", expr):
                    assert dep in needs and output in jobs[dep].get("outputs", {}), (name, expr)
                for step in re.findall(r"steps\.([\w-]+)\.", expr):
                    assert step in step_ids, (name, job_id, expr)
                if re.search(r"(?<![\w.])matrix\.", expr):
                    assert "matrix" in job.get("strategy", {}), (name, job_id, expr)


def _scripts(installed):
    for name, text in installed.items():
        for job_id, job in _load(text)["jobs"].items():
            for step in job["steps"]:
                if "run" in step:
                    yield f"{name}:{job_id}:{step.get('name', step['run'][:30])}", step["run"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is installed by scripts/services.sh")
def test_every_run_block_passes_shellcheck(installed) -> None:
    scripts = list(_scripts(installed))
    assert len(scripts) >= 10
    bad = subprocess.run(["shellcheck", "-s", "bash", "-"], input="kiln build $SPEC\n", capture_output=True, text=True)
    assert bad.returncode != 0  # an unquoted variable is caught
    for where, script in scripts:
        # GitHub substitutes expressions before bash runs the script (bash -e -o pipefail)
        body = EXPR.sub("EXPR", script)
        proc = subprocess.run(["shellcheck", "-s", "bash", "-"], input="set -eo pipefail\n" + body,
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{where}:\n{proc.stdout}"


def test_every_kiln_command_line_is_one_kiln_accepts(installed) -> None:
    seen = set()
    for where, script in _scripts(installed):
        for line in script.splitlines():
            line = line.strip()
            m = re.search(r"(?:^|\$\(|\|\| )kiln (.*?)(?:\)|$| >| \|\|)", line)
            if not m:
                continue
            argv = shlex.split(m.group(1).replace('"${args[@]}"', "--only quantize/x"))
            args, unknown = _parser().parse_known_args(argv)
            seen.add(args.command)
            assert unknown == [], (where, line)
            assert getattr(args, "handler", None) is not None, (where, line)
    assert seen == {"validate", "plan", "build", "publish", "verify"}


def test_the_release_fans_gpu_work_out_through_the_plan_matrix(installed) -> None:
    jobs = _load(installed["kiln-release.yml"])["jobs"]
    assert jobs["gpu"]["strategy"]["matrix"] == "${{ fromJSON(needs.cpu.outputs.matrix) }}"
    assert jobs["gpu"]["runs-on"] == "${{ matrix.runs-on }}"  # the class `kiln plan --matrix` put the chain on
    assert jobs["gpu"]["steps"][-2]["env"]["KILN_BUILDER_CLASS"] == "${{ matrix.class }}"
    assert jobs["cpu"]["env"] == {"KILN_BUILDER_CLASS": "cpu"}
    assert _load(installed["kiln-release.yml"])["env"]["KILN_BUILDERS"] == ".github/kiln-builders.yml"
    assert "--matrix" in jobs["cpu"]["steps"][-1]["run"]
    assert set(jobs["release"]["needs"]) == {"cpu", "gpu"}
    plan = _load(installed["kiln-plan.yml"])
    assert plan["on"]["pull_request"]["paths"] == ["deploy/**"]
    assert any("upload-sarif" in s.get("uses", "") for s in plan["jobs"]["plan"]["steps"])


def _release_steps(text: str) -> list[dict]:
    return _load(text)["jobs"]["release"]["steps"]


def test_the_release_verifies_what_it_published_as_this_repositorys_release_workflow(installed) -> None:
    steps = _release_steps(installed["kiln-release.yml"])
    names = [s.get("name") for s in steps]
    publish = steps[names.index("Publish the release and its provenance")]
    verify = steps[names.index("Verify the release just published")]
    assert names.index("Verify the release just published") == names.index("Publish the release and its provenance") + 1
    # the reference verified is the one publish wrote, not one the workflow rebuilds from the spec
    assert "--release-ref release-ref" in publish["run"] and "--keyless" in publish["run"]
    assert 'release=$(cat release-ref)' in verify["run"]
    argv = shlex.split(verify["run"].splitlines()[-1])
    args = _parser().parse_args(argv[1:])
    assert (args.command, args.release) == ("verify", "$release")
    # trusted signer: this repository's release workflow on the ref it ran on, from the runner's environment
    assert (args.repository, args.ref) == ("$GITHUB_REPOSITORY", "$GITHUB_REF")
    assert args.key is None and args.spec is None and "${{" not in verify["run"]


def test_an_unsigned_release_workflow_runs_no_keyless_verify() -> None:
    texts = render_workflows("deploy/kiln.yaml", "registry.example.com/team",
                             KilnSource(KILN_REPO, KILN_COMMIT), sign=False)
    release = texts["kiln-release.yml"]
    runs = "\n".join(s.get("run", "") for s in _release_steps(release))
    assert "kiln publish" in runs and "--keyless" not in runs
    assert "kiln verify" not in release and "--repository" not in release


def test_init_keeps_what_it_wrote_and_refuses_to_overwrite_edits(tmp_path: Path, capsys) -> None:
    shutil.copytree(SPEC, tmp_path / "deploy")
    args = ["init", str(tmp_path / "deploy" / "kiln.yaml"), "--dir", str(tmp_path), *SOURCE]
    assert main(args) == 0  # the registry comes from the spec's publish.registry
    release = tmp_path / ".github" / "workflows" / "kiln-release.yml"
    assert '--registry "registry.example.com/inference"' in release.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(args) == 0 and capsys.readouterr().out.count("unchanged: ") == 4
    release.write_text(release.read_text(encoding="utf-8") + "# local edit\n", encoding="utf-8")
    assert main(args) == 2
    assert "exists and differs" in capsys.readouterr().err
    assert release.read_text(encoding="utf-8").endswith("# local edit\n")
    assert main(args + ["--force"]) == 0
    assert "replaced: " in capsys.readouterr().out


@pytest.mark.parametrize("kwargs", [{"spec": "../kiln.yaml"}, {"spec": "a b/kiln.yaml"},
                                    {"registry": "r.example.com/$(reboot)"}, {"gpu_runner": ("gpu; rm",)}])
def test_values_that_would_need_quoting_are_refused(kwargs) -> None:
    values = {"spec": "deploy/kiln.yaml", "registry": "r.example.com/team", **kwargs}
    with pytest.raises(InitConflict):
        render_workflows(values.pop("spec"), values.pop("registry"), KilnSource(KILN_REPO, KILN_COMMIT), **values)


def test_a_spec_at_the_repository_root_watches_every_path() -> None:
    texts = render_workflows("kiln.yaml", "r.example.com/team", KilnSource(KILN_REPO, KILN_COMMIT))
    assert _load(texts["kiln-plan.yml"])["on"]["pull_request"]["paths"] == ["**"]


# --- which Kiln the workflows install (issue: the public `kiln` is another project) ----------------

def _project_name() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


def _pip_installs(script: str) -> list[list[str]]:
    """The arguments of every `python -m pip install` line of a run block, in order."""
    out = []
    for line in script.splitlines():
        words = shlex.split(line)
        if words[:4] == ["python", "-m", "pip", "install"]:
            out.append(words[4:])
    return out


def _install_steps(installed):
    for name, text in installed.items():
        for job_id, job in _load(text)["jobs"].items():
            runs = [s["run"] for s in job["steps"] if "run" in s]
            installs = [args for run in runs for args in _pip_installs(run)]
            uses_kiln = any(re.search(r"(?:^|\s|\$\()kiln ", run) for run in runs)
            yield f"{name}:{job_id}", installs, uses_kiln


def test_every_workflow_installs_this_project_from_its_repository_at_the_pinned_commit(installed) -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from compiler import DISTRIBUTION
    from compiler.gitops.kilnsource import TORCH_PIN

    assert canonicalize_name(_project_name()) == canonicalize_name(DISTRIBUTION) != "kiln"
    install_sh = (ROOT / "scripts" / "install.sh").read_text(encoding="utf-8")
    # the same torch pin as a local install
    assert re.search(rf"^  pip_install (--[a-z-]+ )*{re.escape(TORCH_PIN)}\n", install_sh, re.M), TORCH_PIN
    jobs = 0
    for where, installs, uses_kiln in _install_steps(installed):
        kiln = [Requirement(args[0]) for args in installs if len(args) == 1 and "@" in args[0]]
        assert uses_kiln == bool(kiln), (where, installs)  # every job that runs kiln installs it
        if not kiln:
            continue
        jobs += 1
        assert len(kiln) == 1 and all(len(args) == 1 for args in installs), (where, installs)
        (req,) = kiln
        assert canonicalize_name(req.name) == canonicalize_name(_project_name()), where
        assert req.url == f"git+{KILN_REPO}@{KILN_COMMIT}", where
        if "quantize" in req.extras:  # torch, exactly pinned, comes first in the same step
            assert [args[0] for args in installs] == [TORCH_PIN, str(req)], where
        else:
            assert req.extras == set() and len(installs) == 1, where
    assert jobs == 4  # plan; release: cpu, gpu, release


def test_the_install_line_resolves_to_this_project_with_pip(installed, tmp_path: Path) -> None:
    """pip itself reads the workflow's requirement against a git repository of this source tree: the
    name it builds must be the name the line asks for (pip refuses a mismatch), at that commit."""
    from tests.gitrepo import GitRepo

    repo = GitRepo(tmp_path / "kiln")
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, repo.root / name)
    shutil.copytree(ROOT / "compiler", repo.root / "compiler", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    commit = repo.commit("kiln")
    (line,) = [args[-1] for _, installs, _ in _install_steps(installed) for args in installs
               if "[quantize]" in args[-1]][:1]
    local = line.replace(f"git+{KILN_REPO}@{KILN_COMMIT}", f"git+file://localhost{repo.root}@{commit}")
    assert local != line
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
                           "--no-build-isolation", "--quiet", "--disable-pip-version-check", "--report", str(report),
                           local], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (item,) = json.loads(report.read_text(encoding="utf-8"))["install"]
    assert item["metadata"]["name"] == _project_name()
    assert item["download_info"]["vcs_info"]["commit_id"] == commit
    assert item["requested_extras"] == ["quantize"]
    assert any(r.startswith("nvidia-modelopt") for r in item["metadata"]["requires_dist"])
    import tomllib  # and the command it installs is still `kiln`

    assert tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"] == \
        {"kiln": "compiler.cli:main"}


def test_init_from_a_subdirectory_writes_at_the_repository_root_and_ignores_the_store(
        tmp_path: Path, capsys, monkeypatch) -> None:
    from tests.gitrepo import GitRepo

    repo = GitRepo(tmp_path / "repo")
    shutil.copytree(SPEC, repo.root / "deploy")
    (repo.root / ".gitignore").write_text("*.pyc", encoding="utf-8")  # no final newline
    repo.commit("spec")
    monkeypatch.chdir(repo.root / "deploy")
    assert main(["init", "kiln.yaml", *SOURCE]) == 0
    out = capsys.readouterr().out
    assert not (repo.root / "deploy" / ".github").exists()
    plan = _load((repo.root / ".github" / "workflows" / "kiln-plan.yml").read_text(encoding="utf-8"))
    assert plan["on"]["pull_request"]["paths"] == ["deploy/**"]
    assert (repo.root / ".gitignore").read_text(encoding="utf-8").splitlines()[0] == "*.pyc"
    assert ".kiln/" in (repo.root / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert f"updated: {repo.root / '.gitignore'}" in out
    assert f"kiln-compiler @ git+{KILN_REPO}@{KILN_COMMIT}" in out
    assert main(["init", "kiln.yaml", *SOURCE]) == 0
    assert capsys.readouterr().out.count("unchanged: ") == 4  # .gitignore already has the entry


def test_init_outside_a_git_repository_needs_dir(tmp_path: Path, capsys) -> None:
    shutil.copytree(SPEC, tmp_path / "deploy")
    assert main(["init", str(tmp_path / "deploy" / "kiln.yaml"), *SOURCE]) == 2
    assert "not in a git repository" in capsys.readouterr().err
    assert not (tmp_path / ".github").exists() and not (tmp_path / "deploy" / ".github").exists()


@pytest.mark.parametrize("repo, commit, error", [
    ("file:///srv/kiln", KILN_COMMIT, "https:// or ssh://"), ("https://u:pw@git.example/kiln", KILN_COMMIT, "credentials"),
    ("http://git.example/kiln", KILN_COMMIT, "https:// or ssh://"), (KILN_REPO, "main", "40-digit"),
    (KILN_REPO, KILN_COMMIT[:12], "40-digit"), ("https://git.example/k$(reboot)", KILN_COMMIT, "https:// or ssh://")])
def test_a_kiln_source_a_runner_cannot_install_is_a_usage_error(tmp_path: Path, capsys, repo, commit, error) -> None:
    shutil.copytree(SPEC, tmp_path / "deploy")
    assert main(["init", str(tmp_path / "deploy" / "kiln.yaml"), "--dir", str(tmp_path),
                 "--kiln-repo", repo, "--kiln-commit", commit]) == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / ".github").exists()


def test_the_default_source_is_where_the_running_kiln_came_from(tmp_path: Path) -> None:
    from compiler.gitops.kilnsource import SourceError, repo_url, running_source
    from tests.gitrepo import GitRepo

    assert repo_url("git@github.example:acme/kiln.git") == "ssh://git@github.example/acme/kiln.git"
    # pip's record of `pip install "kiln-compiler @ git+https://...@<sha>"` (PEP 610)
    record = json.dumps({"url": KILN_REPO, "vcs_info": {"vcs": "git", "commit_id": KILN_COMMIT}})
    assert running_source(tmp_path, record) == KilnSource(KILN_REPO, KILN_COMMIT)
    wheel = json.dumps({"url": "file:///tmp/kiln_compiler-0.1.0-py3-none-any.whl", "archive_info": {}})
    with pytest.raises(SourceError, match="--kiln-repo URL --kiln-commit"):
        running_source(tmp_path, wheel)
    # a source checkout (scripts/install.sh's editable install): origin and HEAD, clean and pushed
    repo = GitRepo(tmp_path / "kiln")
    shutil.copyfile(ROOT / "pyproject.toml", repo.root / "pyproject.toml")
    (repo.root / "compiler").mkdir()
    (repo.root / "compiler" / "__init__.py").write_text("", encoding="utf-8")
    head = repo.commit("kiln")
    with pytest.raises(SourceError, match="no `origin` remote"):
        running_source(repo.root / "compiler", "")
    repo.git("remote", "add", "origin", "git@github.example:acme/kiln.git")
    with pytest.raises(SourceError, match="on no branch of its remotes"):
        running_source(repo.root / "compiler", "")
    repo.git("update-ref", "refs/remotes/origin/main", head)  # as after `git push`
    assert running_source(repo.root / "compiler", "") == KilnSource("ssh://git@github.example/acme/kiln.git", head)
    (repo.root / "compiler" / "__init__.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(SourceError, match="uncommitted changes"):
        running_source(repo.root / "compiler", "")
    # another project's repository that merely contains a copy of the package is not a source
    other = GitRepo(tmp_path / "other")
    (other.root / "compiler").mkdir()
    (other.root / "compiler" / "__init__.py").write_text("", encoding="utf-8")
    (other.root / "pyproject.toml").write_text('[project]\nname = "other"\n', encoding="utf-8")
    other.commit("other")
    with pytest.raises(SourceError, match="cannot tell"):
        running_source(other.root / "compiler", "")


def _kiln_checkout(tmp_path: Path):
    """A source checkout of this Kiln (its package and pyproject.toml, committed) without a remote:
    `python -m compiler` run from it resolves the Kiln source from it."""
    from tests.gitrepo import GitRepo

    repo = GitRepo(tmp_path / "kiln")
    shutil.copytree(ROOT / "compiler", repo.root / "compiler", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", repo.root / "pyproject.toml")
    return repo, repo.commit("kiln")


def _init(checkout: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(checkout)
    return subprocess.run([sys.executable, "-m", "compiler", "init", str(tmp_path / "deploy" / "kiln.yaml"),
                           "--dir", str(tmp_path), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def test_each_kiln_source_option_works_alone_and_messages_do_not_name_what_it_replaced(tmp_path: Path) -> None:
    repo, head = _kiln_checkout(tmp_path)
    shutil.copytree(SPEC, tmp_path / "deploy")
    # --kiln-repo alone: the commit is the checkout's HEAD; the checkout needs no origin
    proc = _init(repo.root, tmp_path, "--kiln-repo", KILN_REPO, "--registry", "registry.example/team")
    assert proc.returncode == 0, proc.stderr
    assert f"kiln-compiler @ git+{KILN_REPO}@{head}" in proc.stdout
    assert "warning" not in proc.stderr
    # ... and when HEAD does not hold the running Kiln, only --kiln-commit is asked for
    (repo.root / "compiler" / "__init__.py").write_text("x = 1\n" + (ROOT / "compiler" / "__init__.py").read_text(
        encoding="utf-8"), encoding="utf-8")
    proc = _init(repo.root, tmp_path, "--kiln-repo", KILN_REPO, "--registry", "registry.example/team", "--force")
    assert proc.returncode == 2 and "uncommitted changes" in proc.stderr and "--kiln-commit" in proc.stderr
    assert "origin" not in proc.stderr and "--kiln-repo" not in proc.stderr
    # --kiln-commit alone: the repository is origin's, and neither HEAD's state nor its push matters
    proc = _init(repo.root, tmp_path, "--kiln-commit", KILN_COMMIT, "--registry", "registry.example/team", "--force")
    assert proc.returncode == 2 and "no `origin` remote: pass --kiln-repo" in proc.stderr
    assert "--kiln-commit" not in proc.stderr and "uncommitted" not in proc.stderr
    repo.git("remote", "add", "origin", "git@github.example:acme/kiln.git")
    proc = _init(repo.root, tmp_path, "--kiln-commit", KILN_COMMIT, "--registry", "registry.example/team", "--force")
    assert proc.returncode == 0, proc.stderr
    assert f"kiln-compiler @ git+ssh://git@github.example/acme/kiln.git@{KILN_COMMIT}" in proc.stdout


@pytest.mark.parametrize("registry, warned", [
    ("127.0.0.1:5000/team", True), ("localhost:5000/team", True), ("127.1.2.3/team", True),
    ("registry.example:5000/team", False), ("10.0.0.7:5000/team", False), ("localhost.example/team", False)])
def test_a_loopback_registry_in_the_workflows_is_warned_about(tmp_path: Path, registry: str, warned: bool) -> None:
    from compiler.gitops.ci import loopback_host

    assert (loopback_host(registry) is not None) is warned
    assert loopback_host("[::1]:5000/team") == "::1"


def test_init_warns_that_a_runner_cannot_reach_a_loopback_registry(tmp_path: Path) -> None:
    shutil.copytree(SPEC, tmp_path / "deploy")
    proc = _init(ROOT, tmp_path, "--registry", "127.0.0.1:5000/team", *SOURCE)
    assert proc.returncode == 0, proc.stderr
    assert "kiln: warning:" in proc.stderr and "127.0.0.1 is a loopback address" in proc.stderr
    assert "--registry" in proc.stderr
    assert (tmp_path / ".github" / "workflows" / "kiln-plan.yml").is_file()  # a warning, not a refusal
