"""`kiln plan --base REF`: the semantic difference between a spec at a git revision and now."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.cli import main
from tests.gitrepo import GitRepo

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "plan" / "calibration-and-mig"
EXT = {"text": "txt", "markdown": "md", "json": "json"}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> GitRepo:
    r = GitRepo(tmp_path / "repo")
    shutil.copytree(GOLDEN / "spec", r.root / "deploy")
    r.commit("base")
    monkeypatch.chdir(r.root)
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    # the plan's job matrix is what this builder cannot run: pin a CPU runner's capabilities
    monkeypatch.setenv("KILN_BUILDER_HAS", "torch,network,docker")
    return r


def _plan(capsys, *args: str) -> tuple[int, str]:
    code = main(["plan", "deploy/kiln.yaml", *args])
    return code, capsys.readouterr().out


def _change_calibration_and_one_layout(repo: GitRepo) -> None:
    # coder's calibration set (the file's content, under the same name) and GPU 1's MIG layout
    with open(repo.root / "deploy/data/calib-code.jsonl", "a", encoding="utf-8") as f:
        f.write('{"text": "def add(a, b):\\n    return a + b\\n"}\n')
    text = (repo.root / "deploy/kiln.yaml").read_text(encoding="utf-8")
    marker = "      - index: 1\n"
    head, tail = text.split(marker)
    tail = tail.replace("{profile: 1g.23gb, serves: intent}", "{profile: 1g.45gb, serves: intent}", 1)
    (repo.root / "deploy/kiln.yaml").write_text(head + marker + tail, encoding="utf-8")


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_golden_plan_of_a_calibration_and_mig_change(repo: GitRepo, capsys, fmt: str, update_expectations) -> None:
    _change_calibration_and_one_layout(repo)
    code, out = _plan(capsys, "--base", "main", "--format", fmt)
    assert code == 5
    golden = GOLDEN / f"plan.{EXT[fmt]}"
    if update_expectations:
        golden.write_text(out, encoding="utf-8")
    assert out == golden.read_text(encoding="utf-8")


def test_the_plan_names_exactly_those_rebuilds_and_the_one_disrupted_gpu(repo: GitRepo, capsys) -> None:
    _change_calibration_and_one_layout(repo)
    code, out = _plan(capsys, "--base", "main", "--format", "json")
    doc = json.loads(out)
    assert code == 5 and doc["changed"]
    rebuilt = {a["id"]: a for a in doc["actions"]}
    assert set(rebuilt) == {"calibration-set/coder", "quantize/coder", "spec-snapshot", "host-plan/b200-a",
                            "host-script/b200-a", "capacity-report/b200-a"}
    assert all(a["change"] == "changed" for a in doc["actions"])
    data = "models.coder.quantization.calibration.data: the file's content changed"
    profile = 'hosts.b200-a.gpus[1].mig[2].profile: "1g.23gb" -> "1g.45gb"'
    assert rebuilt["calibration-set/coder"]["reasons"] == [data]
    assert rebuilt["quantize/coder"]["reasons"] == [data + " (via calibration-set/coder)"]
    assert rebuilt["host-plan/b200-a"]["reasons"] == [profile]
    assert rebuilt["capacity-report/b200-a"]["reasons"] == [profile]  # one naming scheme: spec paths
    assert rebuilt["spec-snapshot"]["reasons"] == [profile, data]
    assert doc["summary"] == "6 artifacts to rebuild, 12 unchanged; 1 host disrupted"
    assert [(d["host"], d["gpu"], d["kind"]) for d in doc["disruptions"]] == [("b200-a", 1, "mig-reslice")]
    assert [c["unit"] for c in doc["capacity"]] == ["b200-a/gpu1/mig2"]
    assert doc["matrix"] == {"include": []}  # FP8 quantization runs without a GPU


def test_no_change_exits_zero_and_says_so(repo: GitRepo, capsys) -> None:
    repo.edit("deploy/kiln.yaml", "# The commit ids", "# Reviewed. The commit ids")  # a comment only
    code, out = _plan(capsys, "--base", "HEAD")
    assert code == 0
    assert "no change" in out and "0 differ" in out


def test_a_spec_added_by_the_change_is_all_new(repo: GitRepo, capsys) -> None:
    shutil.copytree(GOLDEN / "spec", repo.root / "other")
    code = main(["plan", "other/kiln.yaml", "--base", "HEAD", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 5
    assert "does not exist at HEAD" in doc["base"]["note"]
    assert {a["change"] for a in doc["actions"]} == {"new"}


def test_expected_build_time_comes_from_durations_recorded_in_the_store(repo: GitRepo, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KILN_BUILDER_HAS", "")  # never download the 70B model: its actions are deferred
    assert main(["build", "deploy/kiln.yaml", "-q"]) == 4  # everything else builds
    capsys.readouterr()
    repo.edit("deploy/kiln.yaml", "graphics_mhz: 1965", "graphics_mhz: 1800")  # rebuilds what was built
    code, out = _plan(capsys, "--base", "HEAD", "--format", "json")
    doc = json.loads(out)
    assert code == 5
    snapshot = next(a for a in doc["actions"] if a["id"] == "spec-snapshot")
    assert snapshot["expected_s"] is not None and snapshot["expected_s"] >= 0
    assert doc["unknown_durations"] == 0


def test_a_removed_model_lists_its_artifacts_as_removed(repo: GitRepo, capsys) -> None:
    text = (repo.root / "deploy/kiln.yaml").read_text(encoding="utf-8")
    text = text.replace("          - {profile: 1g.23gb, serves: intent}\n", "")
    start = text.index("  intent:\n")
    end = text.index("hosts:")
    (repo.root / "deploy/kiln.yaml").write_text(text[:start] + text[end:], encoding="utf-8")
    code, out = _plan(capsys, "--base", "HEAD", "--format", "json")
    assert code == 5, out
    removed = {a["id"] for a in json.loads(out)["actions"] if a["change"] == "removed"}
    assert removed == {"calibration-set/intent", "llmapi-options/intent", "quantize/intent", "tokenizer/intent"}


def test_bad_revisions_and_bad_specs_are_clear_errors(repo: GitRepo, capsys) -> None:
    assert main(["plan", "deploy/kiln.yaml", "--base", "no-such-branch"]) == 2
    assert "unknown git revision 'no-such-branch'" in capsys.readouterr().err
    repo.edit("deploy/kiln.yaml", "max_batch_size: 16", "max_batch_szie: 16")
    assert main(["plan", "deploy/kiln.yaml", "--base", "HEAD"]) == 1
    assert "K101" in capsys.readouterr().err


def test_outside_a_git_repository_base_is_a_usage_error(tmp_path: Path, capsys, monkeypatch) -> None:
    shutil.copytree(GOLDEN / "spec", tmp_path / "plain")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert main(["plan", str(tmp_path / "plain" / "kiln.yaml"), "--base", "HEAD"]) == 2
    assert "--base HEAD:" in capsys.readouterr().err


def test_the_matrix_fans_out_gpu_actions_left_to_build(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KILN_BUILDER_HAS", "torch,network,docker")  # a CPU runner
    spec = Path(__file__).parents[1] / "examples" / "nvfp4-moe-blackwell" / "kiln.yaml"  # NVFP4 needs CUDA
    assert main(["plan", str(spec), "--store", str(tmp_path / "store"), "--matrix"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "include": [{"name": "quantize/qwen-moe", "actions": "quantize/qwen-moe"}]}


def test_a_chain_of_gpu_actions_is_one_matrix_job() -> None:
    from compiler.graph.model import Action, Graph
    from compiler.gitops.semplan import job_matrix

    graph = Graph.build([Action("cal/a", "k", 1, {}), Action("q/a", "k", 1, {}, deps=("cal/a",), needs=("gpu",)),
                         Action("gate/a", "k", 1, {}, deps=("q/a",), needs=("torch", "gpu")),
                         Action("q/b", "k", 1, {}, needs=("gpu",)), Action("opts/b", "k", 1, {}, deps=("q/b",))])
    todo = [graph.actions[a] for a in graph.order]
    def gpu(action) -> bool:
        return "gpu" in action.needs

    assert job_matrix(todo, graph, gpu) == {"include": [{"name": "gate/a", "actions": "q/a gate/a"},
                                                   {"name": "q/b", "actions": "q/b"}]}
    assert job_matrix([graph.actions["cal/a"]], graph, gpu) == {"include": []}


# --- issue 36: what the base revision holds, and a fresh clone's store -----------------------------
def _add_blob(repo: GitRepo, rel: str, data: bytes, mode: str = "100644") -> None:
    """A tree entry git holds whatever the file system here allows (a long name, a link anywhere)."""
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo.root, input=data, capture_output=True,
                          check=True).stdout.decode().strip()
    repo.git("update-index", "--add", "--cacheinfo", f"{mode},{blob},{rel}")


def test_links_out_of_the_directory_and_over_long_names_at_the_base_are_left_out(repo: GitRepo, capsys) -> None:
    """They stopped `plan --base` with exit 3 (the tar filter's error, ENAMETOOLONG)."""
    _add_blob(repo, "deploy/abs-link", b"/etc/passwd", "120000")
    _add_blob(repo, "deploy/up-link", b"../../outside", "120000")
    _add_blob(repo, "deploy/" + "n" * 300, b"a name no file system here holds\n")
    repo.git("commit", "-q", "-m", "odd entries")
    code, out = _plan(capsys, "--base", "HEAD")
    assert code == 0 and "no change" in out, out


def test_a_temporary_directory_that_fills_is_a_usage_error_naming_tmpdir(repo: GitRepo, tmp_path: Path) -> None:
    (repo.root / "deploy" / "weights.bin").write_bytes(b"\0" * (4 << 20))
    repo.commit("weights in the spec's directory")

    def limit() -> None:  # files of at most 1 MiB: extraction hits EFBIG, as a full disk hits ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    done = subprocess.run([sys.executable, "-m", "compiler", "plan", "deploy/kiln.yaml", "--base", "HEAD"],
                          cwd=repo.root, capture_output=True, text=True, preexec_fn=limit, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "TMPDIR" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_plan_base_on_a_fresh_clone_leaves_no_half_store_behind(repo: GitRepo, tmp_path: Path, capsys) -> None:
    """It created the store folder with a digest cache alone; plan, verify and gc then said
    "no Kiln store" until a build ran. A folder in that state (an earlier Kiln's) is completed."""
    store = tmp_path / "store"
    assert _plan(capsys, "--base", "HEAD")[0] == 0
    assert not store.exists()
    store.mkdir()
    (store / "digest-cache.json").write_text("{}", encoding="utf-8")
    assert _plan(capsys)[0] == 0
    for argv in (["store", "verify"], ["store", "gc", "--keep", "1"]):
        assert main(argv) == 0, capsys.readouterr()
    assert (store / "objects").is_dir()


def test_an_edit_of_another_host_is_not_given_as_why_a_pool_rebuilds(tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 36: a parameter no spec change of its own matched was explained by every spec change,
    so a clock edit on the MIG host was listed as a cause of the node pool's release."""
    r = GitRepo(tmp_path / "nc")
    shutil.copytree(ROOT / "tests" / "data" / "newcomer", r.root / "deploy")
    r.commit("base")
    monkeypatch.chdir(r.root)
    r.edit("deploy/kiln.yaml", "clocks: {graphics_mhz: 1755}", "clocks: {graphics_mhz: 1700}")
    r.edit("deploy/kiln.yaml", "max_batch_size: 32", "max_batch_size: 24")
    code, out = _plan(capsys, "--base", "HEAD", "--format", "json")
    assert code == 5
    reasons = {a["id"]: a["reasons"] for a in json.loads(out)["actions"]}
    assert any("hosts.h100-a.clocks" in x for x in reasons["host-plan/h100-a"])
    for aid in ("k8s-release", "k8s-deployment/big-h200-pool", "llmapi-options/big"):
        assert not any("hosts.h100-a" in x for x in reasons[aid]), (aid, reasons[aid])


def test_a_long_value_is_cut_around_what_changed() -> None:
    """Issue 36: values were cut at 37 characters (an image digest's change never showed) and
    mappings printed as JSON."""
    from compiler.graph.plan import _change

    image = "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:" + "1c95" * 16
    shown = _change(image, image.replace("sha256:1c95", "sha256:2c95"))
    assert "sha256:1c95" in shown and "sha256:2c95" in shown, shown
    assert _change(None, {"graphics_mhz": 1755}) == "null -> {graphics_mhz: 1755}"


def test_a_pool_roll_is_said_per_workload_not_as_gpus_of_a_host(tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 36: a rebuilt pool image was also listed as per-GPU "container-restart" host lines, so
    the headline counted the pool's GPUs as a host's ("9 GPU(s) on 2 host(s)")."""
    r = GitRepo(tmp_path / "pools")
    shutil.copytree(ROOT / "examples" / "k8s-two-pools", r.root / "deploy")
    r.commit("base")
    monkeypatch.chdir(r.root)
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    r.edit("deploy/kiln.yaml", "max_batch_size: 32", "max_batch_size: 7")
    code, out = _plan(capsys, "--base", "HEAD")
    assert code == 5
    assert "h100-pool (node pool): workload-roll: chat-h100-pool" in out, out
    assert "h100-pool GPU" not in out and "container-restart" not in out, out
    assert "Disruption: 1 node pool(s)" in out, out
