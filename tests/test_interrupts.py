"""Interrupting a build, and what a long action says while it runs.

The first SIGINT or SIGTERM says what it stops and stops it: the processes of isolated actions
(quantization) are killed, nothing else starts, what runs in a thread finishes its step, no release
is recorded, the store stays consistent, exit 130. A second one exits 130 at once. Real signals go
to real processes; every wait is for a marker (a line of output, a file), never a duration."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from compiler.graph.executor import Interrupt, execute
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.graph.progress import duration, estimate, expected_duration, phase_line, running_line
from compiler.store.local import LocalStore
from tests.interrupt_kinds import ChildParams, ChildStep, SlowImportStep, ThreadStep

ROOT = Path(__file__).resolve().parents[1]
CHILD, THREAD = ChildStep(), ThreadStep()
KINDS = KindRegistry([CHILD, THREAD])
WAIT_S = 120  # the most any marker is waited for; only a broken build gets near it


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "KILN_STORE"}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), out.get("PYTHONPATH")]))
    return out


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children(pid: int) -> list[int]:
    """Every process whose parent is `pid` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: its children, theirs, and so on."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def wait_gone(pids: list[int]) -> list[int]:
    """The pids still alive once the others are gone or WAIT_S has passed."""
    ev = threading.Event()
    for _ in range(int(WAIT_S / 0.05)):
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        ev.wait(0.05)
    return [p for p in pids if alive(p)]


# --- the executor: isolated actions in a child process ------------------------------------------
def test_an_isolated_action_runs_in_its_own_process_and_reports_its_phases(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    pid_file = tmp_path / "pid"
    g = Graph.build([CHILD.action("quantize/a", ChildParams(name="a", phases=["loading", "calibrating", "exporting"],
                                                           pid_file=str(pid_file)))])
    lines: list[str] = []
    results = execute(g, store, "spec", KINDS, progress=lines.append)
    r = results["quantize/a"]
    assert r.status == "built", r.error
    assert int(pid_file.read_text()) != os.getpid()
    assert [e.path for e in store.tree(r.tree)] == ["out.txt"]
    log = r.log.read_text(encoding="utf-8")
    assert re.search(r"phase: loading\nin loading\nphase: calibrating\nin calibrating\nphase: exporting", log), log
    assert [re.sub(r" \(\d+s in\)$", "", x.strip()) for x in lines if ": " in x and "[" not in x] == \
        ["quantize/a: loading", "quantize/a: calibrating", "quantize/a: exporting"]


def test_each_isolated_action_is_a_fresh_process_with_the_builds_environment(tmp_path: Path, monkeypatch) -> None:
    """Isolated actions are forked by one process that imported their kind's modules once
    (compiler/graph/zygote.py): each is still a process of its own, leading its own session (what an
    interrupt kills), that starts from the zygote's state, not from the last action's, and sees the
    environment the build has when the action starts."""
    store = LocalStore(tmp_path / "store")
    monkeypatch.setenv("KILN_TEST_PROBE", "first")
    first = Graph.build([CHILD.action("iso/a", ChildParams(name="a", record=str(tmp_path / "a.json")))])
    assert execute(first, store, "spec", KINDS)["iso/a"].status == "built"
    monkeypatch.setenv("KILN_TEST_PROBE", "second")
    second = Graph.build([CHILD.action("iso/b", ChildParams(name="b", record=str(tmp_path / "b.json"))),
                          CHILD.action("iso/c", ChildParams(name="c", record=str(tmp_path / "c.json")))])
    results = execute(second, store, "spec", KINDS, jobs=1)
    assert results["iso/b"].status == results["iso/c"].status == "built"
    seen = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in "abc"}
    assert len({s["pid"] for s in seen.values()} | {os.getpid()}) == 4
    for s in seen.values():
        assert s["sid"] == s["pid"] and s["ran_before"] == []
    assert seen["b"]["ppid"] == seen["c"]["ppid"] != os.getpid()  # one zygote forked both
    assert [seen[n]["probe"] for n in "abc"] == ["first", "second", "second"]


def test_a_failure_in_the_child_process_fails_the_action_with_its_error(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    g = Graph.build([CHILD.action("quantize/a", ChildParams(name="a", fail=True)),
                     THREAD.action("after/a", ChildParams(name="b"), deps=("quantize/a",))])
    results = execute(g, store, "spec", KINDS)
    assert results["quantize/a"].status == "failed"
    assert results["quantize/a"].error == "ValueError: a was told to fail"
    assert "Traceback" in results["quantize/a"].log.read_text(encoding="utf-8")
    assert results["after/a"].status == "skipped"
    assert store.get_action(g.keys["quantize/a"]) is None


def test_an_interrupt_kills_the_child_stores_nothing_of_it_and_starts_nothing_more(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    pid_file = tmp_path / "pid"
    g = Graph.build([CHILD.action("quantize/a", ChildParams(name="a", phases=["calibrating"], hold=True,
                                                           pid_file=str(pid_file))),
                     THREAD.action("other/b", ChildParams(name="b")),
                     THREAD.action("after/a", ChildParams(name="c"), deps=("quantize/a",))])
    interrupt = Interrupt()
    started = threading.Event()
    results: dict = {}

    def progress(line: str) -> None:
        if "quantize/a: calibrating" in line:
            started.set()

    def build() -> None:
        results.update(execute(g, store, "spec", KINDS, progress=progress, interrupt=interrupt, jobs=1))

    t = threading.Thread(target=build)
    t.start()
    assert started.wait(WAIT_S)
    pid = int(pid_file.read_text())
    assert alive(pid)
    assert interrupt.stop() == (["quantize/a"], [])
    t.join(WAIT_S)
    assert not t.is_alive()
    assert results["quantize/a"].status == "interrupted"
    assert results["after/a"].status in ("interrupted", "skipped")
    assert store.get_action(g.keys["quantize/a"]) is None
    assert not wait_gone([pid])
    assert not list((store.root / "tmp").iterdir())  # its work directory is gone
    # other/b ran before it (one job, lowering order) or was never started
    assert results["other/b"].status in ("built", "interrupted")


def test_an_action_whose_zygote_dies_dies_with_it_and_fails_clearly(tmp_path: Path) -> None:
    """The process that forks isolated actions dies (killed by hand, out of memory): the action's
    process dies with it (PR_SET_PDEATHSIG), the action fails saying so, and the next build starts
    another zygote."""
    store = LocalStore(tmp_path / "store")
    g = Graph.build([CHILD.action("iso/a", ChildParams(name="a", phases=["holding"], hold=True,
                                                       release=str(tmp_path / "never"),
                                                       record=str(tmp_path / "a.json")))])
    started = threading.Event()
    results: dict = {}
    t = threading.Thread(target=lambda: results.update(execute(
        g, store, "spec", KINDS, progress=lambda line: "iso/a: holding" in line and started.set())))
    t.start()
    assert started.wait(WAIT_S)
    seen = json.loads((tmp_path / "a.json").read_text())
    os.kill(seen["ppid"], signal.SIGKILL)  # the zygote
    t.join(WAIT_S)
    assert not t.is_alive()
    assert not wait_gone([seen["pid"]])
    r = results["iso/a"]
    assert r.status == "failed" and "the child-step process's exit is unknown" in r.error, r.error
    again = Graph.build([CHILD.action("iso/b", ChildParams(name="b", record=str(tmp_path / "b.json")))])
    assert execute(again, store, "spec", KINDS)["iso/b"].status == "built"
    assert json.loads((tmp_path / "b.json").read_text())["ppid"] != seen["ppid"]


def test_an_interrupt_while_the_zygote_imports_stops_the_action_at_once(tmp_path: Path, monkeypatch) -> None:
    """Before its process exists, an isolated action waits for the zygote to import what its kind
    needs (torch: seconds); an interrupt then kills the zygote rather than wait for the imports."""
    monkeypatch.setenv("KILN_TEST_HOLD", str(tmp_path))  # tests/slow_import.py holds until `release`
    slow = SlowImportStep()
    g = Graph.build([slow.action("quantize/a", ChildParams(name="a"))])
    interrupt = Interrupt()
    results: dict = {}
    t = threading.Thread(target=lambda: results.update(execute(g, LocalStore(tmp_path / "store"), "spec",
                                                               KindRegistry([slow]), interrupt=interrupt)))
    t.start()
    try:
        for _ in range(int(WAIT_S / 0.05)):
            if (tmp_path / "importing").exists():
                break
            threading.Event().wait(0.05)
        zygote = int((tmp_path / "importing").read_text())
        assert interrupt.stop() == (["quantize/a"], [])
        t.join(WAIT_S)  # the release below is never written while it runs: only the kill ends the import
        assert not t.is_alive()
    finally:
        (tmp_path / "release").write_text("")
        t.join(WAIT_S)
    assert results["quantize/a"].status == "interrupted"
    assert not wait_gone([zygote])


# --- progress lines -------------------------------------------------------------------------------
@pytest.mark.parametrize("builders, imports_see", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_zygote_imports_torch_with_openmp_waiting_passively_unless_the_builder_says(
        tmp_path: Path, monkeypatch, builders: str | None, imports_see: str) -> None:
    """OpenMP reads its wait policy when torch loads, in the zygote: spinning threads take a shared
    builder's cores from the threads they wait for (compiler/graph/zygote.py)."""
    if builders is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", builders)
    monkeypatch.setenv("KILN_TEST_HOLD", str(tmp_path))
    (tmp_path / "release").write_text("")  # tests/slow_import.py: no holding
    slow = SlowImportStep()
    g = Graph.build([slow.action("quantize/a", ChildParams(name="a"))])
    results = execute(g, LocalStore(tmp_path / "store"), "spec", KindRegistry([slow]))
    assert results["quantize/a"].status == "built", results["quantize/a"].error
    assert (tmp_path / "omp-wait-policy").read_text(encoding="utf-8") == imports_see


def test_progress_lines_name_the_phase_and_the_estimate_from_the_store() -> None:
    assert duration(4.4) == "4s" and duration(80) == "1m20s" and duration(3725) == "1h02m"
    assert running_line("quantize/tiny", 40, "calibrating", 80) == \
        "still running quantize/tiny: calibrating, 40s of ~1m20s expected (its last build here)"
    assert running_line("quantize/tiny", 95, "exporting", 80) == \
        "still running quantize/tiny: exporting, 1m35s; its last build here took 1m20s"
    assert running_line("quantize/tiny", 15, None, None) == \
        "still running quantize/tiny, 15s (no earlier build here to estimate from)"
    assert running_line("quantize/big", 30, "loading", 80, "quantize/tiny's last build here") == \
        "still running quantize/big: loading, 30s of ~1m20s expected (quantize/tiny's last build here)"
    assert phase_line("quantize/tiny", "loading", 2.2) == "quantize/tiny: loading (2s in)"


def test_the_estimate_is_the_slots_last_build_in_the_store(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    first = Graph.build([THREAD.action("quantize/a", ChildParams(name="a"))])
    assert expected_duration(store, "spec", "quantize/a") is None
    built = execute(first, store, "spec", KINDS)["quantize/a"]
    assert expected_duration(store, "spec", "quantize/a") == built.duration_s
    assert estimate(store, "spec", first, "quantize/a") == (built.duration_s, "its last build here")
    # a new action of the same kind is expected to take what another one took
    third = Graph.build([THREAD.action("quantize/a", ChildParams(name="a")),
                         THREAD.action("quantize/b", ChildParams(name="b"))])
    assert estimate(store, "spec", third, "quantize/b") == (built.duration_s, "quantize/a's last build here")
    # an edited action (another key) is expected to take what its slot took last time
    second = Graph.build([THREAD.action("quantize/a", ChildParams(name="a2"))])
    assert second.keys["quantize/a"] != first.keys["quantize/a"]
    assert expected_duration(store, "spec", "quantize/a") == built.duration_s


def test_no_action_looks_up_its_estimate_before_a_progress_line_needs_it(tmp_path: Path, monkeypatch) -> None:
    """The lookup reads the store (for an action new to it, the records of every action of its
    kind): a build whose actions end before their first progress line makes none."""
    import compiler.graph.executor as executor

    looked_up: list[str] = []
    monkeypatch.setattr(executor, "estimate", lambda store, spec, graph, aid: looked_up.append(aid) or (None, ""))
    monkeypatch.setattr(executor, "TICK_S", 3600.0)  # no action runs long enough for a line
    g = Graph.build([THREAD.action(f"quantize/{n}", ChildParams(name=n)) for n in "abcd"])
    results = execute(g, LocalStore(tmp_path / "store"), "spec", KINDS)
    assert {r.status for r in results.values()} == {"built"}
    assert looked_up == []


def test_a_long_action_reports_the_stores_estimate_looked_up_once(tmp_path: Path, monkeypatch) -> None:
    import compiler.graph.executor as executor

    store = LocalStore(tmp_path / "store")
    assert execute(Graph.build([THREAD.action("quantize/a", ChildParams(name="a"))]), store, "spec",
                   KINDS)["quantize/a"].status == "built"
    looked_up: list[str] = []

    def counting(store, spec, graph, aid):
        looked_up.append(aid)
        return estimate(store, spec, graph, aid)

    monkeypatch.setattr(executor, "estimate", counting)
    monkeypatch.setattr(executor, "TICK_S", 0.01)
    release = tmp_path / "release"
    g = Graph.build([THREAD.action("quantize/a", ChildParams(name="a2", hold=True, release=str(release)))])
    lines: list[str] = []
    results: dict = {}
    t = threading.Thread(target=lambda: results.update(execute(g, store, "spec", KINDS, progress=lines.append)))
    t.start()
    ev = threading.Event()
    for _ in range(int(WAIT_S / 0.05)):  # three progress lines, however long they take to come
        if sum("still running quantize/a" in x for x in list(lines)) >= 3:
            break
        ev.wait(0.05)
    release.write_text("")
    t.join(WAIT_S)
    assert results["quantize/a"].status == "built"
    running = [x for x in lines if "still running quantize/a" in x]
    assert len(running) >= 3 and all("its last build here" in x for x in running), running
    assert looked_up == ["quantize/a"]  # once, however many lines


# --- real signals to a real process ---------------------------------------------------------------
HOLDER = """
import sys
from pathlib import Path
from compiler.cli.interrupts import stopping_on_signals
from compiler.graph.executor import Interrupt, execute
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.store.local import LocalStore
from tests.interrupt_kinds import ChildParams, ChildStep, SlowImportStep, ThreadStep

tmp = Path(sys.argv[1])
child, thread = ChildStep(), ThreadStep()
g = Graph.build([thread.action("slow/t", ChildParams(name="t", phases=["holding"], hold=True)),
                 child.action("slow/c", ChildParams(name="c", phases=["holding"], hold=True,
                                                    pid_file=str(tmp / "child.pid")))])
interrupt = Interrupt()
interrupt.active = True
with stopping_on_signals(interrupt):
    results = execute(g, LocalStore(tmp / "store"), "spec", KindRegistry([child, thread]), jobs=2,
                      progress=lambda line: print(line, file=sys.stderr, flush=True), interrupt=interrupt)
print("returned", file=sys.stderr)
"""


def test_a_second_signal_exits_130_at_once_while_a_thread_finishes_its_step(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=env(), cwd=tmp_path,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if sum("holding" in x for x in seen) == 2 and (tmp_path / "child.pid").exists():
                break
        child = int((tmp_path / "child.pid").read_text())
        proc.send_signal(signal.SIGTERM)  # treated as Ctrl-C
        for line in proc.stderr:
            seen.append(line)
            if "kiln: interrupted:" in line:
                break
        assert "stopping slow/c (killing its process)" in seen[-1] and "waiting for slow/t" in seen[-1], seen
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(WAIT_S) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "kiln: interrupted again: exiting now" in rest and "returned" not in rest
    assert "Traceback" not in "".join(seen) + rest
    assert not wait_gone([child])
    # the thread's step was abandoned mid-way: its work directory is garbage, not a problem
    verify = _kiln("store", "verify", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert verify.returncode == 0 and verify.stdout.endswith(": ok\n"), verify.stdout
    assert any((tmp_path / "store" / "tmp").iterdir())
    gc = _kiln("store", "gc", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert gc.returncode == 0 and not any((tmp_path / "store" / "tmp").iterdir()), gc.stdout + gc.stderr


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


def _quantize_spec(dest: Path) -> Path:
    from tests.quickstart import only_tiny

    shutil.copytree(ROOT / "examples" / "quickstart", dest, ignore=shutil.ignore_patterns(".kiln"))
    spec = dest / "kiln.yaml"
    spec.write_text(only_tiny(spec.read_text(encoding="utf-8")), encoding="utf-8")
    return spec


def _kiln(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=WAIT_S)


def _release(out: str) -> str:
    m = re.search(r"^release (sha256:[0-9a-f]{64})", out, re.M)
    assert m, out
    return m.group(1)


def test_ctrl_c_during_quantize_kills_it_and_leaves_the_store_consistent(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("modelopt")
    spec = _quantize_spec(tmp_path / "spec")
    store = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-m", "compiler", "build", str(spec), "--store", str(store)],
                            env=env(), cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen: list[str] = []
    kids: list[int] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "quantize/tiny: loading" in line:
                # the quantize process (its session's leader), and the zygote that forked it
                kids = descendants(proc.pid)
                break
        assert any(_session(k) == k for k in kids), seen
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "kiln: interrupted: stopping quantize/tiny (killing its process)" in err
    assert "stopped: quantize/tiny" in err and "no release was recorded" in err
    assert "Traceback" not in err and not out
    assert not wait_gone(kids)
    verify = _kiln("store", "verify", "--store", str(store), cwd=tmp_path)
    assert verify.returncode == 0 and verify.stdout.endswith(": ok\n"), verify.stdout
    assert not (store / "releases").exists() or not any((store / "releases").iterdir())
    # what the interrupted build stored is what a fresh build makes: the same release
    skip = ("--skip", "quantize/*", "--allow-partial", "-q")
    again = _kiln("build", str(spec), "--store", str(store), *skip, cwd=tmp_path)
    fresh = _kiln("build", str(spec), "--store", str(tmp_path / "fresh"), *skip, cwd=tmp_path)
    assert again.returncode == fresh.returncode == 0, again.stderr + fresh.stderr
    assert _release(again.stdout) == _release(fresh.stdout)
    assert " 0 executed" in again.stdout  # everything the interrupted build made was reused
