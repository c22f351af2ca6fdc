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
import subprocess
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.cli import _parser, main
from compiler.gitops.ci import InitConflict, render_workflows

SPEC = Path(__file__).parent / "golden" / "plan" / "calibration-and-mig" / "spec"
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
CONTEXTS = {"github", "env", "secrets", "vars", "needs", "steps", "matrix", "job", "runner", "strategy", "inputs"}
FUNCTIONS = {"always", "success", "failure", "cancelled", "fromJSON", "toJSON", "contains", "startsWith",
             "endsWith", "format", "join", "hashFiles"}


@pytest.fixture
def installed(tmp_path: Path, capsys) -> dict[str, str]:
    shutil.copytree(SPEC, tmp_path / "deploy")
    assert main(["init", str(tmp_path / "deploy" / "kiln.yaml"), "--dir", str(tmp_path),
                 "--registry", "127.0.0.1:5000/team"]) == 0
    assert capsys.readouterr().out.count("wrote: ") == 2
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
    assert seen == {"validate", "plan", "build", "publish"}


def test_the_release_fans_gpu_work_out_through_the_plan_matrix(installed) -> None:
    jobs = _load(installed["kiln-release.yml"])["jobs"]
    assert jobs["gpu"]["strategy"]["matrix"] == "${{ fromJSON(needs.cpu.outputs.matrix) }}"
    assert jobs["gpu"]["runs-on"] == ["self-hosted", "linux", "gpu"]
    assert "--matrix" in jobs["cpu"]["steps"][-1]["run"]
    assert set(jobs["release"]["needs"]) == {"cpu", "gpu"}
    plan = _load(installed["kiln-plan.yml"])
    assert plan["on"]["pull_request"]["paths"] == ["deploy/**"]
    assert any("upload-sarif" in s.get("uses", "") for s in plan["jobs"]["plan"]["steps"])


def test_init_keeps_what_it_wrote_and_refuses_to_overwrite_edits(tmp_path: Path, capsys) -> None:
    shutil.copytree(SPEC, tmp_path / "deploy")
    args = ["init", str(tmp_path / "deploy" / "kiln.yaml"), "--dir", str(tmp_path)]
    assert main(args) == 0  # the registry comes from the spec's publish.registry
    release = tmp_path / ".github" / "workflows" / "kiln-release.yml"
    assert '--registry "registry.example.com/inference"' in release.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(args) == 0 and capsys.readouterr().out.count("unchanged: ") == 2
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
        render_workflows(values.pop("spec"), values.pop("registry"), **values)


def test_a_spec_at_the_repository_root_watches_every_path() -> None:
    texts = render_workflows("kiln.yaml", "r.example.com/team")
    assert _load(texts["kiln-plan.yml"])["on"]["pull_request"]["paths"] == ["**"]
