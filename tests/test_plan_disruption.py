"""`kiln plan` names the hosts and GPUs a change disrupts, against what the store last built."""

from __future__ import annotations

import pytest

import shutil
from pathlib import Path

from compiler.build import build_spec, plan_spec
from compiler.cli import main
from compiler.store.local import LocalStore

EXAMPLE = Path(__file__).parents[1] / "examples" / "b200-mig-three-models"

@pytest.fixture(autouse=True)
def _bare_builder(monkeypatch):
    """These tests are about the store and the graph: build as a builder without torch, a GPU or the
    network on every machine (model actions are then deferred; tests/test_quantize.py runs them)."""
    monkeypatch.setenv("KILN_BUILDER_HAS", "")


def _built(tmp_path: Path) -> tuple[Path, LocalStore]:
    shutil.copytree(EXAMPLE, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    store = LocalStore(tmp_path / "store")
    assert not build_spec(spec, store).failed
    return spec, store


def _edit(spec: Path, old: str, new: str) -> None:
    text = spec.read_text(encoding="utf-8")
    assert old in text
    spec.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_profile_change_reslices_every_gpu_of_the_layout_and_nothing_else(tmp_path: Path) -> None:
    spec, store = _built(tmp_path)
    _edit(spec, "{profile: 1g.23gb, serves: intent}", "{profile: 1g.45gb, serves: intent}")
    found = {(d.host, d.gpu_index, d.kind) for d in plan_spec(spec, store).disruptions}
    assert found == {("b200-a", 0, "mig-reslice"), ("b200-a", 1, "mig-reslice")}


def test_a_clock_change_is_listed_per_gpu_without_a_reslice(tmp_path: Path) -> None:
    spec, store = _built(tmp_path)
    _edit(spec, "graphics_mhz: 1965", "graphics_mhz: 1900")
    found = plan_spec(spec, store).disruptions
    assert {(d.gpu_index, d.kind) for d in found} == {(0, "clocks"), (1, "clocks")}
    assert all("1900" in d.detail for d in found)


def test_a_change_that_no_host_reads_disrupts_nothing(tmp_path: Path, capsys) -> None:
    spec, store = _built(tmp_path)
    _edit(spec, "max_queue_size: 256", "max_queue_size: 300")
    assert plan_spec(spec, store).disruptions == []
    assert main(["plan", str(spec), "--store", str(store.root)]) == 0
    assert "Disruption: no host or GPU changes" in capsys.readouterr().out


def test_the_markdown_plan_has_a_disruption_table(tmp_path: Path, capsys) -> None:
    spec, store = _built(tmp_path)
    _edit(spec, "{profile: 1g.23gb, serves: intent}", "{profile: 1g.45gb, serves: intent}")
    assert main(["plan", str(spec), "--store", str(store.root), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| b200-a | 0 | mig-reslice |" in out and "| b200-a | 1 | mig-reslice |" in out


def _graph(spec: Path):
    from compiler.store.digests import DigestCache
    from compiler.lower import lower
    from compiler.pipeline import validate_path

    result = validate_path(spec)
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    return lower(result, DigestCache(None))


def test_a_batch_limit_edit_restarts_the_containers_of_the_rebuilt_image(tmp_path: Path) -> None:
    """With `image:`, a serving-only edit rebuilds the host's image; every container on it restarts,
    and the plan says so per GPU (it said "no host or GPU changes")."""
    from compiler.gitops.semplan import host_disruptions

    shutil.copytree(EXAMPLE, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    base = _graph(spec)
    assert "image/b200-a" in base.actions
    _edit(spec, "limits: {max_batch_size: 32", "limits: {max_batch_size: 24")
    head = _graph(spec)
    assert base.keys["image/b200-a"] != head.keys["image/b200-a"]
    found = host_disruptions(base, head)
    assert {(d.gpu_index, d.kind) for d in found} == {(0, "container-restart"), (1, "container-restart")}
    assert all(d.detail.startswith("serving image rebuilt: ") and "mig" in d.detail for d in found)


def test_a_port_change_recreates_only_that_models_containers(tmp_path: Path) -> None:
    from compiler.gitops.semplan import host_disruptions

    shutil.copytree(EXAMPLE, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    text = spec.read_text(encoding="utf-8").replace("\nimage:", "\n#image:")  # without an image: host-script alone
    spec.write_text(text, encoding="utf-8")
    base = _graph(spec)
    assert not any(a.startswith("image") for a in base.actions)
    _edit(spec, "http: 8200", "http: 8300")
    found = host_disruptions(base, _graph(spec))
    assert found and {d.kind for d in found} == {"container-restart"}
    assert all("ports changed" in d.detail and "mig2" in d.detail for d in found)  # intent: the third slice


def test_a_reslice_is_not_also_listed_as_a_restart(tmp_path: Path) -> None:
    from compiler.gitops.semplan import host_disruptions

    shutil.copytree(EXAMPLE, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    base = _graph(spec)
    _edit(spec, "{profile: 1g.23gb, serves: intent}", "{profile: 1g.45gb, serves: intent}")
    found = {(d.gpu_index, d.kind) for d in host_disruptions(base, _graph(spec))}
    assert found == {(0, "mig-reslice"), (1, "mig-reslice")}


# --- disaggregated serving: a role's change restarts that role's servers ------------------------
DISAGG = Path(__file__).parents[1] / "examples" / "disaggregated"


def _disagg(tmp_path: Path, image: bool) -> Path:
    shutil.copytree(DISAGG, tmp_path / "spec")
    spec = tmp_path / "spec" / "kiln.yaml"
    if image:  # the serving image built by kiln: every role's files are in one image
        spec.write_text(spec.read_text(encoding="utf-8") + "\nimage: {repository: registry.example.com/inference/disagg}\n",
                        encoding="utf-8")
    return spec


def _restarts(base, head) -> dict[int, str]:
    from compiler.gitops.semplan import host_disruptions

    found = host_disruptions(base, head)
    assert {d.kind for d in found} <= {"container-restart"} and {d.host for d in found} <= {"h200"}
    return {d.gpu_index: d.detail for d in found}


@pytest.mark.parametrize("image", [False, True], ids=["host-script", "with-image"])
def test_a_prefill_only_change_restarts_the_prefill_servers_only(tmp_path: Path, image: bool) -> None:
    spec = _disagg(tmp_path, image)
    base = _graph(spec)
    # (not the prefill batch: the KV-aware router scores prefill load against it, review N10)
    _edit(spec, "limits: {max_batch_size: 4}", "limits: {max_batch_size: 4}\n          runtime: {chunked_prefill: true}")
    found = _restarts(base, _graph(spec))
    assert set(found) == {0, 1}  # gpu0 and gpu1 serve prefill; the decode server (4-7) keeps running
    assert all("prefill" in detail and "router" not in detail for detail in found.values())


@pytest.mark.parametrize("image", [False, True], ids=["host-script", "with-image"])
def test_a_decode_only_change_restarts_the_decode_server_only(tmp_path: Path, image: bool) -> None:
    spec = _disagg(tmp_path, image)
    base = _graph(spec)
    _edit(spec, "runtime: {kv_cache_memory_fraction: 0.9}", "runtime: {kv_cache_memory_fraction: 0.85}")
    found = _restarts(base, _graph(spec))
    assert set(found) == {4, 5, 6, 7}
    assert all("gpu4+5+6+7" in detail and "decode" in detail and "prefill" not in detail for detail in found.values())


def test_a_router_change_restarts_the_router_and_the_servers_it_reads_kv_events_from(tmp_path: Path) -> None:
    """round robin instead of KV-aware: the router's config changes, and so does every server's
    options (no KV-cache event buffer without a KV-aware router to read it, review N2)."""
    from compiler.gitops.semplan import host_disruptions

    spec = _disagg(tmp_path, True)
    base = _graph(spec)
    _edit(spec, "router: {kv_aware: true}", "router: {kv_aware: false}")
    head = _graph(spec)
    found = {d.gpu_index: d.detail for d in host_disruptions(base, head) if d.kind == "container-restart"}
    assert set(found) == {0, 1, 4, 5, 6, 7}
    for gpu, detail in found.items():
        # the router serves the model's every GPU here: each names it, beside its own server
        assert "chat-router (router of chat) is recreated (config changed)" in detail
        role = "prefill" if gpu < 4 else "decode"
        assert f"({role} server) is recreated (the {role} role's options changed)" in detail
    old, new = (g.actions["host-script/h200"].params for g in (base, head))
    assert all(a.inputs != b.inputs for a, b in zip(old.units, new.units))
    assert old.routers[0].inputs != new.routers[0].inputs


def test_a_router_on_another_host_names_the_servers_its_restart_interrupts(tmp_path: Path) -> None:
    spec = _disagg(tmp_path, False)
    _edit(spec, "router: {kv_aware: true}", "router: {kv_aware: true, host: edge}")
    spec.write_text(spec.read_text(encoding="utf-8") + "  edge:\n    gpu: H200-SXM-141GB\n    count: 1\n    gpus: []\n",
                    encoding="utf-8")
    base = _graph(spec)
    _edit(spec, "router: {kv_aware: true, host: edge}", "router: {kv_aware: false, host: edge}")
    found = _restarts(base, _graph(spec))
    assert set(found) == {0, 1, 4, 5, 6, 7}  # the servers on h200: the router on edge has no GPU to name
    assert all("chat-router (router of chat)" in detail for detail in found.values())
