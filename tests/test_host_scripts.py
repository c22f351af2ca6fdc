"""Host provisioning scripts (`host-script` action) against shellcheck, a stand-in nvidia-smi that
enforces the real MIG, clock and power rules (tests/fakes/nvidia-smi), and, where a Docker daemon
is reachable, real Docker.

No GPU is needed: nvidia-smi on a MIG GPU is the one component that cannot exist here, so the
stand-in reproduces its output formats and refuses what the driver refuses. Everything else the
scripts touch (bash, coreutils, awk, Docker) is the real thing.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from compiler.actions import runtimes
from compiler.store.digests import DigestCache
from compiler.graph.kinds import RunContext
from compiler.targets.disruption import Disruption
from compiler.lower import lower
from compiler.pipeline import validate_path
from compiler.targets.registry import REGISTRY
from compiler.targets.hosts import hostplan, hostscript
from tests.fakes import fake_host

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FAKES = ROOT / "tests" / "fakes"
GOLDEN = ROOT / "tests" / "golden" / "host"
EXAMPLE_NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "kiln.yaml").is_file())
# The stand-in runs as `python3` from PATH: this interpreter's directory comes first, so a version
# manager's shim (tens of milliseconds a call, dozens of calls a run) is not what starts it.
FAKE_PATH = os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]])
NO_DOCKER = "kiln-test-no-docker"  # a docker command that does not exist: the fake-GPU tests never reach Docker


# --- generating the files -----------------------------------------------------------------------
def generate(spec: Path) -> dict[str, dict[str, bytes]]:
    """host -> {file name: bytes}, by lowering the spec and running host-plan then host-script."""
    result = validate_path(spec)
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    graph = lower(result, DigestCache(None))
    out: dict[str, dict[str, bytes]] = {}
    log = logging.getLogger("test-host-scripts")
    for aid, action in sorted(graph.actions.items()):
        if action.kind != hostscript.KIND.kind:
            continue
        assert action.deps == (f"host-plan/{action.params.host}",)
        with tempfile.TemporaryDirectory() as tmp:
            plan_dir, script_dir = Path(tmp, "plan"), Path(tmp, "script")
            plan_dir.mkdir()
            script_dir.mkdir()
            plan_action = graph.actions[action.deps[0]]
            REGISTRY[plan_action.kind].run(plan_action.params, RunContext(plan_dir, {}, {}, log))
            hostscript.KIND.run(action.params, RunContext(script_dir, {}, {action.deps[0]: plan_dir}, log))
            files = {p.name: p.read_bytes() for p in sorted(script_dir.iterdir())}
            assert os.access(script_dir / "provision.sh", os.X_OK)
            assert files["desired-state.json"] == (plan_dir / "host-plan.json").read_bytes()
            out[action.params.host] = files
    return out


def engine_target(doc) -> None:
    """The legacy engine target: one TensorRT engine, served by Triton's tensorrtllm backend."""
    doc.insert(list(doc).index("name") + 1, "target", "engine")
    for model in doc["models"].values():
        model.get("runtime", {}).pop("cuda_graph_batch_sizes", None)  # a PyTorch-backend option (K603)


def engine_tp4_pp2(doc) -> None:
    engine_target(doc)
    doc["models"]["llama70b"]["parallelism"] = {"tp": 4, "pp": 2}


# Specs the examples do not cover, each derived from an example by an edit of its YAML. An engine
# spec at tp × pp > 1 validated and then failed to build (its rank count reached the script
# unquoted): every file-level test below runs on these as on the examples.
VARIANTS = {
    "h200-tp8-llama70b+engine": ("h200-tp8-llama70b", engine_target),
    "h200-tp8-llama70b+engine-tp4-pp2": ("h200-tp8-llama70b", engine_tp4_pp2),
}


def variant_spec(name: str, dest: Path) -> Path:
    from ruamel.yaml import YAML

    example, edit = VARIANTS[name]
    shutil.copytree(EXAMPLES / example, dest)
    yaml = YAML()
    doc = yaml.load((dest / "kiln.yaml").read_text())
    edit(doc)
    with (dest / "kiln.yaml").open("w") as f:
        yaml.dump(doc, f)
    return dest / "kiln.yaml"


@functools.lru_cache(maxsize=None)
def example_files(example: str) -> dict[str, dict[str, bytes]]:
    if example in VARIANTS:
        with tempfile.TemporaryDirectory() as tmp:
            return generate(variant_spec(example, Path(tmp, example)))
    return generate(EXAMPLES / example / "kiln.yaml")


EXAMPLE_HOSTS = [(e, h) for e in [*EXAMPLE_NAMES, *VARIANTS] for h in sorted(example_files(e))]


def write_script(files: dict[str, bytes], dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "provision.sh"
    path.write_bytes(files["provision.sh"])
    path.chmod(0o755)
    return path


# --- a simulated host ---------------------------------------------------------------------------
class Host:
    """A fake GPU host in a temporary directory, and runs of a provisioning script against it."""

    def __init__(self, root: Path, plan: dict, processes: dict | None = None, driver: str | None = None):
        self.root = root
        self.state = root / "gpus.json"
        self.state_dir = root / "kiln-state"
        self.boot = root / "boot_id"
        self.boot.write_text("boot-1\n")
        self.runs = 0
        self.log = root / "calls-0.jsonl"
        if driver is None:
            text = (plan.get("driver") or "").lstrip("<>=")
            driver = text if text.count(".") == 2 else "580.82.07"
        fake_host.make_host(self.state, plan["gpu"], plan["gpu_count"], driver, processes=processes)

    def run(self, script: Path, *args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
        self.runs += 1
        self.log = self.root / f"calls-{self.runs}.jsonl"
        full_env = {**os.environ, "PATH": FAKE_PATH,
                    "KILN_FAKE_SMI_STATE": str(self.state), "KILN_FAKE_SMI_LOG": str(self.log),
                    "KILN_STATE_DIR": str(self.state_dir), "KILN_BOOT_ID_FILE": str(self.boot),
                    "KILN_DOCKER": NO_DOCKER, **(env or {})}
        return subprocess.run(["bash", str(script), *args], env=full_env, cwd=cwd or self.root,
                              capture_output=True, text=True, timeout=300)

    def load(self) -> dict:
        return fake_host.load(self.state)

    def mutations(self) -> list[dict]:
        return fake_host.mutating_calls(self.log)

    def edit(self, fn) -> None:
        state = self.load()
        fn(state)
        fake_host.save(self.state, state)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def gpu_of(call: dict) -> int:
    argv = call["argv"]
    return int(argv[argv.index("-i") + 1])


def assert_converged(host: Host, plan: dict) -> None:
    """The fake host is in the plan's desired state."""
    state = host.load()
    for g in plan["gpus"]:
        live = state["gpus"][g["index"]]
        assert live["persistence"] == plan["persistence"]
        if g["mig"]:
            assert live["mig_current"] and live["mig_pending"]
            want = sorted((i["profile_id"], i["start"]) for i in g["mig"]["instances"])
            assert fake_host.gi_layout(state, g["index"]) == want
            assert all(len(gi["cis"]) == 1 for gi in live["gis"])
        else:
            assert not live["mig_current"]
        locked = g["locked_clocks"]
        assert live["locked_gpu"] == (locked["graphics_mhz"] if locked else None)
        if locked and locked["memory_mhz"]:
            assert live["locked_mem"] == [locked["memory_mhz"]] * 2
        if g["power_limit_w"]:
            assert live["power_limit"] == g["power_limit_w"]


MIG = "b200-mig-three-models"  # host b200-a: GPUs 0 and 1 each split 3g.90gb + 2g.45gb + 1g.23gb


def b200() -> tuple[dict, dict[str, bytes]]:
    files = example_files(MIG)["b200-a"]
    return json.loads(files["desired-state.json"]), files


def requires_shellcheck() -> str:
    path = shutil.which("shellcheck")
    if path is None:
        pytest.skip("shellcheck is not installed (scripts/test.sh installs Debian's shellcheck with apt; "
                    "apt was not available to this run)")
    return path


# --- static checks ------------------------------------------------------------------------------
@pytest.mark.parametrize("example,host", EXAMPLE_HOSTS, ids=[f"{e}/{h}" for e, h in EXAMPLE_HOSTS])
def test_shellcheck_passes_on_every_generated_script(example: str, host: str, tmp_path: Path) -> None:
    shellcheck = requires_shellcheck()
    script = write_script(example_files(example)[host], tmp_path)
    proc = subprocess.run([shellcheck, "--severity=style", "--shell=bash", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("example,host", EXAMPLE_HOSTS, ids=[f"{e}/{h}" for e, h in EXAMPLE_HOSTS])
def test_golden_files(example: str, host: str, update_expectations: bool) -> None:
    """The generated files of every example, frozen; `pytest --update-expectations` rewrites them."""
    files = example_files(example)[host]
    where = GOLDEN / example / host
    if update_expectations:
        if where.exists():
            shutil.rmtree(where)
        where.mkdir(parents=True)
        for name, data in files.items():
            (where / name).write_bytes(data)
    assert where.is_dir(), f"no golden files for {example}/{host}: run pytest --update-expectations"
    assert sorted(p.name for p in where.iterdir()) == sorted(files)
    for name, data in files.items():
        assert (where / name).read_bytes() == data, f"{example}/{host}/{name} changed: review, then --update-expectations"


def test_every_example_host_gets_the_four_files() -> None:
    for example, host in EXAMPLE_HOSTS:
        assert sorted(example_files(example)[host]) == sorted(
            ["provision.sh", f"kiln-host-{host}.service", "mig-parted.yaml", "desired-state.json"])


@pytest.mark.parametrize("variant,ranks", [("h200-tp8-llama70b+engine", 8), ("h200-tp8-llama70b+engine-tp4-pp2", 8)])
def test_a_multi_rank_engine_unit_starts_one_tritonserver_per_rank(variant: str, ranks: int) -> None:
    """The engine's world is tp × pp ranks: mpirun starts that many tritonservers (upstream's
    launch_triton_server.py: rank 0 loads the whole ensemble, the others the engine model only,
    each with its own shared-memory prefix), on the unit's eight GPUs."""
    script = example_files(variant)["h200-node"]["provision.sh"].decode()
    line = next(x for x in script.splitlines() if ") CMD=(" in x)  # the one unit's
    argv = shlex.split(line.split("CMD=(", 1)[1].rsplit(") ;;", 1)[0])
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    per_rank = " ".join(argv[2:]).split(" : ")
    assert len(per_rank) == ranks
    assert all(r.startswith("-n 1 tritonserver ") for r in per_rank)
    assert [f"shm-region-prefix-name=prefix{i}_" in r for i, r in enumerate(per_rank)] == [True] * ranks
    assert "--load-model=llama70b-preprocessing" in per_rank[0]
    assert not any("preprocessing" in r for r in per_rank[1:])
    assert f"# {ranks} ranks: one tritonserver per rank under mpirun" in line
    unit = next(shlex.split(x) for x in script.splitlines() if x.startswith("plan_unit "))
    assert unit[4] == "0,1,2,3,4,5,6,7"  # plan_unit ID NAME MODEL GPUS ...: the unit's eight GPUs


def test_mig_parted_config_groups_gpus_by_layout() -> None:
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(example_files(MIG)["b200-a"]["mig-parted.yaml"].decode())
    assert doc == {"version": "v1", "mig-configs": {"kiln-b200-a": [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.90gb": 1, "2g.45gb": 1, "1g.23gb": 1}}]}}
    h200 = YAML(typ="safe").load(example_files("h200-tp8-llama70b")["h200-node"]["mig-parted.yaml"].decode())
    assert h200["mig-configs"]["kiln-h200-node"] == [{"devices": list(range(8)), "mig-enabled": False}]
    plan = {"host": "x", "gpus": [
        {"index": 0, "mig": {"instances": [{"profile": "1g.10gb"}, {"profile": "1g.10gb"}]}},
        {"index": 1, "mig": None},
        {"index": 2, "mig": {"instances": [{"profile": "1g.10gb"}, {"profile": "1g.10gb"}]}},
        {"index": 3, "mig": {"instances": [{"profile": "7g.80gb"}]}}]}
    assert hostscript.mig_parted_config(plan)["mig-configs"]["kiln-x"] == [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"1g.10gb": 2}},
        {"devices": [1], "mig-enabled": False},
        {"devices": [3], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]


def test_systemd_unit_runs_the_boot_mode() -> None:
    unit = example_files(MIG)["b200-a"]["kiln-host-b200-a.service"].decode()
    assert "ExecStart=/usr/local/lib/kiln/b200-a/provision.sh --boot" in unit
    assert "WantedBy=multi-user.target" in unit
    # boot is not held for model loads: multi-user.target is ordered after the units it wants, and
    # a oneshot counts as started only when its script (which waits for every model) exits
    assert "Type=exec" in unit and "Type=oneshot" not in unit and "RemainAfterExit=yes" in unit
    # the boot mode re-creates the containers on their new MIG devices, so it runs once Docker is up
    after = next(line for line in unit.splitlines() if line.startswith("After="))
    assert "docker.service" in after.split("=", 1)[1].split() and "Before=docker.service" not in unit
    # NVSwitch baseboards: CUDA fails until Fabric Manager has set up the fabric (B200, H200 SXM)
    for example, host in ((MIG, "b200-a"), ("h200-tp8-llama70b", "h200-node")):
        text = example_files(example)[host][f"kiln-host-{host}.service"].decode()
        for key in ("After=", "Wants="):
            line = next(x for x in text.splitlines() if x.startswith(key))
            assert "nvidia-fabricmanager.service" in line.split("=", 1)[1].split(), (host, line)
    # a GPU without an NVSwitch baseboard in the facts gets no such ordering
    assert hostscript.boot_after("L40S-48GB") == []
    with pytest.raises(ValueError):
        hostscript.unit_word("a$(touch x)")


def test_unquoted_template_value_is_an_error(tmp_path: Path) -> None:
    """The guard that makes `|q` mandatory: a template placing a bare value fails to render."""
    from jinja2 import TemplateError

    (tmp_path / "t.j2").write_text("echo {{ name }}\n")
    (tmp_path / "ok.j2").write_text("echo {{ name|q }} ${#x}\n")
    env = hostscript.environment(tmp_path)
    with pytest.raises(TemplateError, match="unquoted value"):
        env.get_template("t.j2").render(name="$(touch pwned)")
    assert env.get_template("ok.j2").render(name="$(touch pwned)") == "echo '$(touch pwned)' ${#x}\n"


def test_lowering_keys_on_templates_and_depends_on_the_host_plan(tmp_path: Path, monkeypatch) -> None:
    result = validate_path(EXAMPLES / MIG / "kiln.yaml")
    graph = lower(result, DigestCache(None))
    action = graph.actions["host-script/b200-a"]
    assert action.deps == ("host-plan/b200-a",)
    assert set(action.params.templates) == set(hostscript.TEMPLATES)
    assert [u.ports for u in action.params.units][:2] == [
        {"http": 8000, "grpc": 8001, "metrics": 8002}, {"http": 8100, "grpc": 8101, "metrics": 8102}]
    copy_dir = tmp_path / "templates"
    shutil.copytree(hostscript.TEMPLATE_DIR, copy_dir)
    (copy_dir / hostscript.SCRIPT_TEMPLATE).write_text(
        (copy_dir / hostscript.SCRIPT_TEMPLATE).read_text() + "# changed\n")
    monkeypatch.setattr(hostscript, "TEMPLATE_DIR", copy_dir)
    monkeypatch.setattr(hostscript.template_digests, "__defaults__", (copy_dir,))
    graph2 = lower(result, DigestCache(None))
    assert graph2.keys["host-script/b200-a"] != graph.keys["host-script/b200-a"]
    assert graph2.keys["host-plan/b200-a"] == graph.keys["host-plan/b200-a"]


# --- against the stand-in -----------------------------------------------------------------------
@pytest.mark.parametrize("example,host", EXAMPLE_HOSTS, ids=[f"{e}/{h}" for e, h in EXAMPLE_HOSTS])
def test_fresh_host_converges_and_a_second_run_changes_nothing(example: str, host: str, tmp_path: Path) -> None:
    files = example_files(example)[host]
    plan = json.loads(files["desired-state.json"])
    script = write_script(files, tmp_path / "script")
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", plan)

    first = h.run(script)
    assert first.returncode == 0, output(first)
    assert "change:" in first.stdout
    assert "containers: skipped: no --image given" in first.stdout
    assert_converged(h, plan)
    assert h.mutations(), "a fresh host needs changes"

    before = h.state.read_bytes()
    second = h.run(script)
    assert second.returncode == 0, output(second)
    assert "no changes: the host already matches its desired state" in second.stdout
    assert "change:" not in second.stdout
    assert h.mutations() == []
    assert h.state.read_bytes() == before

    check = h.run(script, "--check")
    assert check.returncode == 0, output(check)
    assert "converged" in check.stdout and "drift:" not in check.stdout


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan)
    before = h.state.read_bytes()
    proc = h.run(script, "--dry-run")
    assert proc.returncode == 0, output(proc)
    assert "would: GPU 0: MIG mode Disabled -> Enabled" in proc.stdout
    assert "would: GPU 1: create GPU instance 9:0 (3g.90gb) with its compute instance" in proc.stdout
    assert "would: GPU 0: lock graphics clocks at 1965,1965" in proc.stdout
    assert "dry run: 14 change(s) would be made" in proc.stdout
    assert h.mutations() == []
    assert h.state.read_bytes() == before
    assert not h.state_dir.exists()


def test_check_reports_drift_and_the_next_run_repairs_only_that(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan)
    assert h.run(script).returncode == 0
    gpu0_before = copy.deepcopy(h.load()["gpus"][0]["gis"])

    def drift(state: dict) -> None:
        gpu1 = state["gpus"][1]
        gpu1["gis"] = [gi for gi in gpu1["gis"] if gi["start"] != 4]  # someone destroyed the 2g.45gb instance
        state["gpus"][0]["power_limit"] = 900.0  # and lowered a power limit
    h.edit(drift)
    drifted = h.state.read_bytes()

    check = h.run(script, "--check")
    assert check.returncode == 1, output(check)
    assert "drift: GPU 1: MIG layout:" in check.stdout and "missing 14:4(2g.45gb)" in check.stdout
    assert "drift: GPU 0: power limit 900 W -> 1000 W" in check.stdout
    assert "2 difference(s) from the desired state" in check.stdout
    assert "GPU 0: MIG layout" not in check.stdout
    assert h.state.read_bytes() == drifted and h.mutations() == []

    repair = h.run(script)
    assert repair.returncode == 0, output(repair)
    calls = [(gpu_of(c), c["argv"]) for c in h.mutations()]
    assert calls == [(1, ["mig", "-i", "1", "-cgi", "14:4", "-C"]), (0, ["-i", "0", "-pl", "1000"])]
    assert_converged(h, plan)
    assert h.load()["gpus"][0]["gis"] == gpu0_before  # untouched: same IDs, same MIG device UUIDs
    assert h.run(script, "--check").returncode == 0


def test_a_split_or_foreign_instance_is_resliced_on_that_gpu_only(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan)
    assert h.run(script).returncode == 0

    def no_ci(state: dict) -> None:  # someone destroyed the compute instance of the 1g@6 instance
        for gi in state["gpus"][0]["gis"]:
            if gi["start"] == 6:
                gi["cis"] = []
    h.edit(no_ci)
    gid = next(gi["id"] for gi in h.load()["gpus"][0]["gis"] if gi["start"] == 6)
    check = h.run(script, "--check")
    assert check.returncode == 1
    assert f"GPU instance {gid} has no compute instance" in check.stdout
    repair = h.run(script)
    assert repair.returncode == 0, output(repair)
    assert [c["argv"] for c in h.mutations()] == [["mig", "-i", "0", "-gi", str(gid), "-cci", "1g.23gb"]]
    assert_converged(h, plan)

    def extra(state: dict) -> None:  # an instance the plan does not have, in a free slot
        state["gpus"][0]["gis"] = [gi for gi in state["gpus"][0]["gis"] if gi["start"] != 6]
        state["gpus"][0]["gis"].append({"id": 11, "profile_id": 20, "start": 6, "cis": [
            {"id": 0, "profile_id": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000001"}]})
    h.edit(extra)
    repair = h.run(script)
    assert repair.returncode == 0, output(repair)
    assert [c["argv"] for c in h.mutations()] == [
        ["mig", "-i", "0", "-gi", "11", "-dci"], ["mig", "-i", "0", "-gi", "11", "-dgi"],
        ["mig", "-i", "0", "-cgi", "19:6", "-C"]]
    assert_converged(h, plan)


def test_lost_clock_locks_after_a_reboot_are_drift_and_boot_mode_restores_them(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan)
    assert h.run(script).returncode == 0
    fake_host.reboot(h.state)
    h.boot.write_text("boot-2\n")

    check = h.run(script, "--check")
    assert check.returncode == 1
    assert "drift: GPU 0: lock graphics clocks at 1965,1965 (recorded lock" not in check.stdout
    assert "drift: GPU 0: lock graphics clocks at 1965,1965 (not locked by this script since the last boot)" in check.stdout
    assert "drift: GPU 1: lock memory clock at 3996,3996" in check.stdout
    assert "drift: GPU 0: MIG layout: live [ ] want [ 9:0 14:4 19:6 ]" in check.stdout
    assert "drift: GPU 0: persistence mode Disabled -> Enabled" in check.stdout

    boot = h.run(script, "--boot")
    assert boot.returncode == 0, output(boot)
    assert "containers: skipped: no --image given and none recorded" in boot.stdout  # no run started any yet
    assert not any(c["argv"][-2:] == ["-mig", "1"] for c in h.mutations())  # the MIG mode survived the reboot
    assert_converged(h, plan)
    assert h.run(script, "--check").returncode == 0


def synthetic_plan(plan: dict, **gpu_changes) -> dict:
    out = copy.deepcopy(plan)
    for g in out["gpus"]:
        g.update(copy.deepcopy(gpu_changes))
    return out


def render(plan: dict, units: list[dict], dest: Path) -> Path:
    context = hostscript.script_context(plan, units, "test")
    return write_script({"provision.sh": hostscript.render_script(context).encode()}, dest)


def test_application_clock_drift_is_read_back_and_repaired(tmp_path: Path) -> None:
    base = json.loads(example_files("h200-tp8-llama70b")["h200-node"]["desired-state.json"])
    plan = synthetic_plan(base, locked_clocks=None, application_clocks={"memory_mhz": 3201, "graphics_mhz": 1500})
    script = render(plan, [], tmp_path / "script")
    h = Host(tmp_path, plan)
    assert h.run(script).returncode == 0
    assert all(g["app_clocks"] == [3201, 1500] for g in h.load()["gpus"])
    h.edit(lambda s: s["gpus"][3].update(app_clocks=[3201, 1980]))
    check = h.run(script, "--check")
    assert check.returncode == 1
    assert "drift: GPU 3: application clocks (memory,graphics) 3201,1980 -> 3201,1500" in check.stdout
    assert h.run(script).returncode == 0
    assert [c["argv"] for c in h.mutations()] == [["-i", "3", "-ac", "3201,1500"]]


def test_a_lock_the_spec_drops_is_released_and_the_other_lock_stays_recorded(tmp_path: Path) -> None:
    plan, files = b200()  # locks graphics clocks at 1965,1965 and the memory clock at 3996,3996
    h = Host(tmp_path, plan)
    assert h.run(write_script(files, tmp_path / "script")).returncode == 0
    dropped = synthetic_plan(plan, locked_clocks={"graphics_mhz": [1965, 1965]})
    script = render(dropped, [], tmp_path / "dropped")
    check = h.run(script, "--check")
    assert check.returncode == 1
    assert "drift: GPU 0: release the memory clock lock 3996,3996 (the spec no longer locks it)" in check.stdout
    assert h.run(script).returncode == 0
    assert [c["argv"] for c in h.mutations()] == [["-i", "0", "-rmc"], ["-i", "1", "-rmc"]]
    gpus = h.load()["gpus"][:2]  # the plan's GPUs 0 and 1
    assert [(g["locked_gpu"], g["locked_mem"]) for g in gpus] == [([1965, 1965], None)] * 2
    record = (h.state_dir / "gpu0.clocks").read_text()
    assert record == "boot=boot-1\nlgc=1965,1965\nlmc=\n"  # the graphics lock is still this boot's
    assert h.run(script, "--check").returncode == 0


def test_clocks_the_gpu_refuses_are_reported_not_recorded(tmp_path: Path) -> None:
    """nvidia-smi may only warn (exit 0) when it cannot lock a clock; the script must notice."""
    base = json.loads(example_files("h200-tp8-llama70b")["h200-node"]["desired-state.json"])
    plan = synthetic_plan(base, locked_clocks={"graphics_mhz": [2500, 2500], "memory_mhz": None},
                          application_clocks={"memory_mhz": 1000, "graphics_mhz": 1500}, power_limit_w=5000)
    script = render(plan, [], tmp_path / "script")
    h = Host(tmp_path, plan)
    proc = h.run(script)
    assert proc.returncode == 1, output(proc)
    assert "GPU 0: nvidia-smi -lgc 2500,2500 did not confirm the lock" in proc.stderr
    assert "GPU 0: application clocks are 3201,1980 after nvidia-smi -ac 1000,1500" in proc.stderr
    assert "GPU 0: power limit is 700.00 W after nvidia-smi -pl 5000" in proc.stderr
    assert all(g["locked_gpu"] is None for g in h.load()["gpus"])
    assert h.run(script, "--check").returncode == 1  # nothing was recorded as applied


@pytest.mark.parametrize("fail_at", [1, 3, 4, 6, 9, 12, 14])
def test_an_interrupted_run_converges_when_run_again(fail_at: int, tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan)
    broken = h.run(script, env={"KILN_FAKE_SMI_FAIL_AT": str(fail_at)})
    assert broken.returncode != 0
    calls = h.mutations()
    assert not any(c.get("injected") for c in calls[:fail_at - 1]) and calls[fail_at - 1].get("injected")
    assert "ERROR" in broken.stderr
    again = h.run(script)
    assert again.returncode == 0, output(again)
    assert_converged(h, plan)
    assert h.run(script).stdout.count("change:") == 0


def edited_example(tmp_path: Path, old: str, new: str) -> dict[str, bytes]:
    spec_dir = tmp_path / "spec"
    shutil.copytree(EXAMPLES / MIG, spec_dir)
    text = (spec_dir / "kiln.yaml").read_text()
    assert text.count(old) == 1
    (spec_dir / "kiln.yaml").write_text(text.replace(old, new))
    return generate(spec_dir / "kiln.yaml")["b200-a"]


def test_changing_one_gpus_layout_touches_only_that_gpu(tmp_path: Path) -> None:
    plan, files = b200()
    h = Host(tmp_path, plan)
    assert h.run(write_script(files, tmp_path / "v1")).returncode == 0
    gpu0 = copy.deepcopy(h.load()["gpus"][0])

    new_files = edited_example(tmp_path, """      - index: [0, 1]
        mig:
          - {profile: 3g.90gb, serves: chat}
          - {profile: 2g.45gb, serves: coder}
          - {profile: 1g.23gb, serves: intent}
""", """      - index: 0
        mig:
          - {profile: 3g.90gb, serves: chat}
          - {profile: 2g.45gb, serves: coder}
          - {profile: 1g.23gb, serves: intent}
      - index: 1
        mig:
          - {profile: 3g.90gb, serves: chat}
          - {profile: 3g.90gb, serves: coder}
""")
    new_plan = json.loads(new_files["desired-state.json"])
    proc = h.run(write_script(new_files, tmp_path / "v2"))
    assert proc.returncode == 0, output(proc)
    calls = h.mutations()
    assert calls and {gpu_of(c) for c in calls} == {1}
    assert any("-dgi" in c["argv"] for c in calls) and any("-cgi" in c["argv"] for c in calls)
    assert h.load()["gpus"][0] == gpu0  # same instances, same IDs and MIG device UUIDs
    assert_converged(h, new_plan)
    assert [d.kind for d in disruptions(plan, new_plan)] == ["mig-reslice", "serving-change"]
    assert {d.gpu_index for d in disruptions(plan, new_plan)} == {1}


def test_mig_mode_change_is_refused_while_processes_run_and_forced_with_force(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan, processes={0: [{"pid": 4242, "name": "python3"}, {"pid": 4343, "name": "tritonserver"}]})

    refused = h.run(script)
    assert refused.returncode == 1
    assert "GPU 0: refusing to change MIG mode to Enabled while compute processes run (4242 python3, 4343 tritonserver)" in refused.stderr
    assert "--force" in refused.stderr
    assert not any(gpu_of(c) == 0 and "-mig" in c["argv"] for c in h.mutations())
    assert not any(gpu_of(c) == 0 and "-cgi" in c["argv"] for c in h.mutations())  # GPU 0 is left alone
    state = h.load()
    assert not state["gpus"][0]["mig_pending"]
    assert fake_host.gi_layout(state, 1) == [(9, 0), (14, 4), (19, 6)]  # GPU 1 converged meanwhile

    forced = h.run(script, "--force")
    assert forced.returncode == 1
    assert ["-i", "0", "-mig", "1"] in [c["argv"] for c in h.mutations()]
    assert "GPU 0: MIG mode change to Enabled is pending: it takes effect after a GPU reset" in forced.stderr
    assert "nvidia-smi --gpu-reset -i 0" in forced.stderr
    state = h.load()
    assert state["gpus"][0]["mig_pending"] and not state["gpus"][0]["mig_current"]

    check = h.run(script, "--check")
    assert check.returncode == 1 and "drift: GPU 0: MIG mode change to Enabled is pending" in check.stdout

    # what the operator does: stop the process, reset the GPU; then the script finishes the job
    h.edit(lambda s: s["gpus"][0].update(processes=[]))
    env = {**os.environ, "KILN_FAKE_SMI_STATE": str(h.state)}
    subprocess.run([str(FAKES / "nvidia-smi"), "-i", "0", "--gpu-reset"], env=env, check=True, capture_output=True)
    done = h.run(script)
    assert done.returncode == 0, output(done)
    assert_converged(h, plan)


def test_gpu_filter_acts_on_the_listed_gpus_only(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan)
    proc = h.run(script, "--gpus", "1")
    assert proc.returncode == 0, output(proc)
    assert h.mutations() and {gpu_of(c) for c in h.mutations()} == {1}
    assert h.load()["gpus"][0]["gis"] == [] and not h.load()["gpus"][0]["mig_current"]
    bad = h.run(script, "--gpus", "5")
    assert bad.returncode == 2 and "GPU 5 is not managed by this plan" in bad.stderr


def test_a_host_without_gpu_assignments_is_checked_but_left_alone(tmp_path: Path) -> None:
    base = json.loads(example_files("h200-tp8-llama70b")["h200-node"]["desired-state.json"])
    plan = dict(base, gpus=[])
    script = render(plan, [], tmp_path / "script")
    h = Host(tmp_path, plan)
    proc = h.run(script)
    assert proc.returncode == 0, output(proc)
    assert "driver 550.90.07 satisfies >=550.90.07" in proc.stdout
    assert "containers: the plan has no serving units" in proc.stdout and h.mutations() == []


def test_wrong_driver_stops_before_any_change(tmp_path: Path) -> None:
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    h = Host(tmp_path, plan, driver="575.57.08")
    proc = h.run(script)
    assert proc.returncode == 1
    assert "driver 575.57.08 does not satisfy the spec's constraint >=580.82.07" in proc.stderr
    assert h.mutations() == []
    check = h.run(script, "--check")
    assert check.returncode == 1 and "drift: driver 575.57.08 does not satisfy >=580.82.07" in check.stdout


# --- names ------------------------------------------------------------------------------------
def test_the_spec_refuses_names_with_shell_metacharacters(tmp_path: Path) -> None:
    spec_dir = tmp_path / "spec"
    shutil.copytree(EXAMPLES / "quickstart", spec_dir)
    text = (spec_dir / "kiln.yaml").read_text()
    text = text.replace("\n  tiny:", '\n  "$(touch pwned)":').replace("serves: tiny}", 'serves: "`touch pwned`"}')
    text = text.replace("\n  dev-h100:", '\n  "dev; rm -rf x":')
    (spec_dir / "kiln.yaml").write_text(text)
    result = validate_path(spec_dir / "kiln.yaml")
    k106 = [d for d in result.diagnostics if d.code == "K106"]
    assert len(k106) == 3 and not result.ok
    assert {"$(touch pwned)", "dev; rm -rf x", "`touch pwned`"} <= {
        m for d in k106 for m in ("$(touch pwned)", "dev; rm -rf x", "`touch pwned`") if m in d.message}


HOSTILE_MODELS = ["$(touch pwned)", "; rm -rf x", "`touch pwned`", "a'b\"c\\d $HOME"]


def hostile_setup() -> tuple[dict, list[dict]]:
    """The quickstart plan with every name replaced by shell syntax (bypassing the spec's K106)."""
    base = json.loads(example_files("quickstart")["dev-h100"]["desired-state.json"])
    plan = copy.deepcopy(base)
    plan["host"] = "h$(touch pwned);rm -rf x"
    mig = plan["gpus"][0]["mig"]
    profile = mig["instances"][0]
    mig["instances"] = [dict(profile, start=s, slot=n, serves=HOSTILE_MODELS[n], profile="1g.10gb`touch pwned`")
                        for n, s in enumerate([0, 2, 4])]
    mig["instances"][0]["profile_id"] = 15
    mig["create"] = [f"{i['profile_id']}:{i['start']}" for i in mig["instances"]]
    units = []
    for n in range(3):
        ports = {"http": 9000 + 3 * n, "grpc": 9001 + 3 * n, "metrics": 9002 + 3 * n}
        serving = runtimes.unit_serving(("triton", "trtllm-serve", "triton")[n], "llmapi", HOSTILE_MODELS[n], ports)
        units.append({"id": f"{plan['host']}/gpu0/mig{n}", "model": HOSTILE_MODELS[n], "gpus": [0], "mig_slot": n,
                      "ports": ports, "serving": serving.to_json()})
    return plan, units


def test_hostile_names_stay_data(tmp_path: Path) -> None:
    plan, units = hostile_setup()
    script = render(plan, units, tmp_path / "script")
    text = script.read_text()
    assert "'$(touch pwned)'" in text and "'; rm -rf x'" in text
    work = tmp_path / "work"
    work.mkdir()
    (work / "x").mkdir()  # what `rm -rf x` would remove
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", plan)
    for args in ([], ["--check"], ["--dry-run"], []):
        proc = h.run(script, *args, cwd=work)
        assert "pwned" not in {p.name for p in work.iterdir()}, output(proc)
        assert (work / "x").is_dir()
    assert not any(p.name == "pwned" for p in tmp_path.rglob("*"))
    assert h.run(script, "--check", cwd=work).returncode == 0  # it really ran to convergence
    if shutil.which("shellcheck"):  # its only notes are SC2016 "expressions don't expand in single quotes": the point
        lint = subprocess.run(["shellcheck", "--severity=style", "--format=gcc", str(script)], capture_output=True, text=True)
        assert lint.stdout and all("[SC2016]" in line for line in lint.stdout.splitlines()), lint.stdout


# --- disruptions ------------------------------------------------------------------------------
def disruptions(old: dict | None, new: dict) -> list[Disruption]:
    """The host-plan kind's comparison, on two desired-state documents as provision.sh gets them."""
    state = hostplan.HostState.model_validate
    return hostplan.disruptions(None if old is None else state(old), state(new))


def test_disruptions_of_an_unchanged_plan_are_none() -> None:
    plan, _ = b200()
    assert disruptions(plan, copy.deepcopy(plan)) == []


def test_disruptions_name_the_gpu_and_what_changes() -> None:
    plan, _ = b200()
    new = copy.deepcopy(plan)
    new["gpus"][0]["locked_clocks"]["graphics_mhz"] = [1800, 1800]
    new["gpus"][1]["power_limit_w"] = 900
    new["gpus"][1]["mig"]["instances"][2]["serves"] = "chat"
    assert disruptions(plan, new) == [
        Disruption("b200-a", 0, "clocks", "locked graphics 1965 MHz, locked memory 3996 MHz -> "
                                          "locked graphics 1800 MHz, locked memory 3996 MHz"),
        Disruption("b200-a", 1, "serving-change", "chat@0, coder@4, intent@6 -> chat@0, coder@4, chat@6"),
        Disruption("b200-a", 1, "power", "1000 W -> 900 W"),
    ]


def test_disruptions_of_mig_changes() -> None:
    plan, _ = b200()
    grown = copy.deepcopy(plan)
    del grown["gpus"][0]["mig"]["instances"][2]  # old plan without the 1g: the new one only adds it
    assert disruptions(grown, plan)[0] == Disruption("b200-a", 0, "mig-reslice", "creates only 1g.23gb@6")
    moved = copy.deepcopy(plan)
    moved["gpus"][1]["mig"]["instances"][1].update(start=2)
    assert disruptions(plan, moved)[0] == Disruption("b200-a", 1, "mig-reslice", "destroys 2g.45gb@4; creates 2g.45gb@2")
    whole = copy.deepcopy(plan)
    whole["gpus"][1].update(mig=None, serves="chat", group=[1])
    kinds = [(d.gpu_index, d.kind) for d in disruptions(plan, whole)]
    assert kinds == [(1, "mig-reslice"), (1, "serving-change")]
    assert "MIG mode disabled" in disruptions(plan, whole)[0].detail
    fewer = copy.deepcopy(plan)
    fewer["gpus"] = fewer["gpus"][:1]
    assert disruptions(plan, fewer) == [
        Disruption("b200-a", 1, "serving-change", "leaves the plan: stops serving chat@0, coder@4, intent@6")]


def test_disruptions_of_a_new_host_list_everything_it_sets() -> None:
    h200 = json.loads(example_files("h200-tp8-llama70b")["h200-node"]["desired-state.json"])
    found = disruptions(None, h200)
    assert {d.kind for d in found} == {"serving-change", "clocks", "power"}
    assert len([d for d in found if d.kind == "serving-change"]) == 8
    assert found[0].detail == "nothing -> llama70b (GPUs 0,1,2,3,4,5,6,7)"
    tp = copy.deepcopy(h200)
    for g in tp["gpus"]:
        g["group"] = [0, 1, 2, 3] if g["index"] < 4 else [4, 5, 6, 7]
    assert {d.kind for d in disruptions(h200, tp)} == {"serving-change"}


# --- real Docker ------------------------------------------------------------------------------
def docker_reachable() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.mark.skipif(not docker_reachable(), reason="no Docker daemon reachable (docker info failed): the "
                    "container step runs for real only where dockerd is up")
def test_gpus_flag_reaches_docker_as_a_device_list(tmp_path: Path) -> None:
    """The default attach mode passes `--gpus '"device=0,1,..."'`; Docker must read it as a list of
    device IDs (without the inner quotes its CSV parser splits at the commas). Without the NVIDIA
    runtime the container cannot start, but Docker creates it first, so its request is visible."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (Debian package busybox-static)")
    ctx = tmp_path / "image"
    (ctx / "bin").mkdir(parents=True)
    shutil.copy(busybox, ctx / "bin" / "busybox")
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY bin/ /bin/\n")
    image = "kiln-test-gpus-flag:busybox"
    subprocess.run(["docker", "build", "-q", "-t", image, str(ctx)], check=True, capture_output=True)
    files = example_files("h200-tp8-llama70b")["h200-node"]
    plan = json.loads(files["desired-state.json"])
    script = write_script(files, tmp_path / "script")
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", plan)
    name = "kiln-h200-node-gpu0_1_2_3_4_5_6_7"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)  # left by an interrupted earlier run
    try:
        proc = h.run(script, "--image", image, env={"KILN_DOCKER": "docker"})
        assert f"change: container {name} (missing): start llama70b (triton) on 0,1,2,3,4,5,6,7 ports 8000/8001/8002" \
            in proc.stdout, output(proc)
        info = json.loads(subprocess.run(["docker", "inspect", name], capture_output=True, text=True,
                                         check=True).stdout)[0]
        requests = info["HostConfig"]["DeviceRequests"]
        assert [r["DeviceIDs"] for r in requests] == [[str(i) for i in range(8)]]
        assert requests[0]["Capabilities"] == [["gpu"]]
        assert info["Config"]["Labels"]["kiln.unit"] == "h200-node/gpu0+1+2+3+4+5+6+7"
        assert info["Args"][-3:] == ["--http-port=8000", "--grpc-port=8001", "--metrics-port=8002"]
        # eight GPUs, one container: NCCL between its processes needs /dev/shm and unlimited locked memory
        host = info["HostConfig"]
        assert host["ShmSize"] == 2 * 1024 ** 3 and host["IpcMode"] in ("private", "shareable")
        assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]} == \
            {"memlock": (-1, -1), "stack": (67108864, 67108864)}
        assert info["Config"]["Healthcheck"]["Test"] == [
            "CMD-SHELL", "/opt/kiln/bin/serve --probe 8000 /v2/health/ready /v2/models/llama70b/ready"]
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


# --- the stand-in itself ------------------------------------------------------------------------
def smi(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILN_FAKE_SMI_STATE": str(state)}
    return subprocess.run([str(FAKES / "nvidia-smi"), *args], env=env, capture_output=True, text=True)


def test_the_stand_in_refuses_what_the_driver_refuses(tmp_path: Path) -> None:
    """A script that gets the rules wrong must fail against the stand-in, as on a real GPU."""
    state = tmp_path / "gpus.json"
    fake_host.make_host(state, "A100-SXM4-40GB", 2, "580.82.07", processes={1: [777]}, mig_enabled=[0])

    assert smi(state, "mig", "-i", "0", "-cgi", "9:4", "-C").returncode == 0
    overlap = smi(state, "mig", "-i", "0", "-cgi", "0:0", "-C")  # 7g@0 needs all eight memory slices
    assert overlap.returncode != 0 and "Insufficient Resources" in overlap.stdout
    overlap = smi(state, "mig", "-i", "0", "-cgi", "14:4")  # inside the 3g@4
    assert overlap.returncode != 0 and "Insufficient Resources" in overlap.stdout
    bad_start = smi(state, "mig", "-i", "0", "-cgi", "9:2")  # 3g starts at 0 or 4 only
    assert bad_start.returncode != 0 and "Invalid Argument" in bad_start.stdout
    bad_profile = smi(state, "mig", "-i", "0", "-cgi", "99")
    assert bad_profile.returncode != 0 and "using profile 99: Invalid Argument" in bad_profile.stdout
    assert [smi(state, "mig", "-i", "0", "-cgi", f"19:{s}", "-C").returncode for s in (0, 1, 2, 3)] == [0] * 4
    too_many = smi(state, "mig", "-i", "0", "-cgi", "19")  # slots full: 3g@4 + four 1g
    assert too_many.returncode != 0 and "Insufficient Resources" in too_many.stdout
    gid = next(gi["id"] for gi in fake_host.load(state)["gpus"][0]["gis"] if gi["start"] == 4)
    in_use = smi(state, "mig", "-i", "0", "-gi", str(gid), "-dgi")  # its compute instance still exists
    assert in_use.returncode != 0 and f"Unable to destroy GPU instance ID  {gid} from GPU  0: In use by another client" \
        in in_use.stdout
    assert smi(state, "mig", "-i", "0", "-gi", str(gid), "-dci").returncode == 0
    assert smi(state, "mig", "-i", "0", "-gi", str(gid), "-dgi").returncode == 0

    pending = smi(state, "-i", "1", "-mig", "1")  # a compute process runs on GPU 1
    assert "pending enable state" in pending.stdout and "In use by another client" in pending.stdout
    gpu1 = fake_host.load(state)["gpus"][1]
    assert gpu1["mig_pending"] and not gpu1["mig_current"]
    assert smi(state, "mig", "-i", "1", "-cgi", "19", "-C").returncode != 0  # not in MIG mode yet

    refused = smi(state, "-i", "0", "-pl", "50")
    assert refused.returncode != 0 and "is not a valid power limit which should be between 100.00 W and 400.00 W" \
        in refused.stdout
    high = smi(state, "-i", "0", "-lgc", "2000,2000")
    assert "GPU clocks set to" not in high.stdout and fake_host.load(state)["gpus"][0]["locked_gpu"] is None
    ok = smi(state, "-i", "0", "-lgc", "1410,1410")
    assert 'GPU clocks set to "(gpuClkMin 1410, gpuClkMax 1410)" for GPU 00000000:18:00.0' in ok.stdout
    everywhere = smi(state, "-lgc", "1410,1410")  # would change every GPU: the stand-in insists on -i
    assert everywhere.returncode != 0
    unknown = smi(state, "-i", "0", "--lock-gpu-clocks-deferred=1000")
    assert unknown.returncode != 0


def test_read_only_calls_never_write_the_state(tmp_path: Path) -> None:
    state = tmp_path / "gpus.json"
    fake_host.make_host(state, "H100-SXM5-80GB", 1, "580.82.07", mig_enabled=[0])
    assert smi(state, "mig", "-i", "0", "-cgi", "19:0", "-C").returncode == 0
    before = state.read_bytes()
    for args in (["-L"], ["-q", "-i", "0"], ["mig", "-lgi", "-i", "0"], ["mig", "-lci", "-i", "0"],
                 ["--query-gpu=index,mig.mode.current,power.limit", "--format=csv"],
                 ["--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", "0"]):
        assert smi(state, *args).returncode == 0, args
    assert state.read_bytes() == before
    listing = smi(state, "-i", "0", "-L").stdout.splitlines()
    assert listing[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert listing[1].startswith("  MIG 1g.10gb     Device  0: (UUID: MIG-")


# --- CPU pinning follows the GPUs' NUMA nodes (issue 22, item 7) --------------------------------
def fake_sysfs(root: Path, gpu_nodes: dict[int, int], node_cpus: dict[int, str]) -> Path:
    """/sys as Linux lays it out: each GPU's PCI device (bus ids as the stand-in nvidia-smi gives
    them, 00000000:18:00.0 for GPU 0, in sysfs's 4-digit-domain form) with its numa_node, and each
    node's cpulist."""
    for gpu, node in gpu_nodes.items():
        dev = root / "bus" / "pci" / "devices" / f"0000:{0x18 + 0x10 * gpu:02x}:00.0"
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(f"{node}\n")
    for node, cpus in node_cpus.items():
        where = root / "devices" / "system" / "node" / f"node{node}"
        where.mkdir(parents=True)
        (where / "cpulist").write_text(cpus + "\n")
    return root


def planned_cpusets(h: Host, script: Path, sysfs: Path) -> list[str]:
    """The CPUs a dry run would start each serving container on, in unit order."""
    docker = h.root / "fake-docker"  # answers `info` (reachable) and lists no containers
    docker.write_text('#!/bin/sh\ncase "$1" in info|ps) exit 0 ;; *) exit 1 ;; esac\n')
    docker.chmod(0o755)
    proc = h.run(script, "--dry-run", "--image", "serving:1", env={"KILN_DOCKER": str(docker), "KILN_SYSFS": str(sysfs)})
    assert proc.returncode == 0, output(proc)
    return re.findall(r"^would: container \S+ \(missing\): start .*, CPUs (\S+)$", proc.stdout, re.M)


def test_units_are_pinned_to_the_cpus_of_their_gpus_numa_node(tmp_path: Path) -> None:
    """b200-a: three MIG units on GPU 0 (node 0), three on GPU 1 (node 1). Each unit's CPUs are
    its GPU's node's, split evenly between the node's units; a host that does not say where its
    GPUs sit (numa_node -1, or no sysfs) splits all its CPUs between all units, as before."""
    plan, files = b200()
    script = write_script(files, tmp_path / "script")
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", plan)
    assert h.run(script).returncode == 0  # converged: the MIG devices exist
    two_sockets = fake_sysfs(tmp_path / "sys2", {0: 0, 1: 1}, {0: "0-7,16-23", 1: "8-15,24-31"})
    assert planned_cpusets(h, script, two_sockets) == ["0-4", "5-7,16-17", "18-22",
                                                       "8-12", "13-15,24-25", "26-30"]
    cpus = int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)
    per = cpus // 6
    whole_host = [f"{k * per}-{k * per + per - 1}" if per > 1 else str(k * per) if per == 1 else str(k % cpus)
                  for k in range(6)]
    unknown = fake_sysfs(tmp_path / "sys1", {0: -1, 1: 0}, {0: "0-31"})
    assert planned_cpusets(h, script, unknown) == whole_host
    assert planned_cpusets(h, script, tmp_path / "no-sysfs") == whole_host
