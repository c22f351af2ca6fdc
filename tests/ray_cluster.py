"""A real Ray cluster on this machine: a head and worker nodes, each a `ray start --block` process
in a session of its own, with custom resources standing for what it has ({"torch": 1}, ...).
Every port is chosen free (Ray's fixed defaults, 10001 for the client server and 52365 for each
node's dashboard agent, would collide between nodes and with other clusters here). Stopping kills
the process groups this object started, nothing else (never `ray stop`, which ends every Ray
process of the machine). Ray 2.60 advertises the machine's own address for the head even when
given 127.0.0.1 (ray/_private/services.py resolve_ip_for_localhost); it is this machine all the same.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.services import free_port

ROOT = Path(__file__).resolve().parents[1]
START_S = 180.0  # the nodes of a cluster up, at load 8
# A node whose raylet does not register with the GCS within Ray's own 30 s (ray/_private/node.py,
# raylet_start_wait_time_s, not configurable) exits; at load 8 that happens: it is started again.
NODE_STARTS = 3


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return shutil.which("ray", path=str(Path(sys.executable).parent)) is not None


class RayCluster:
    def __init__(self, workers: list[dict], worker_memory: int = 6_000_000_000) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-ray-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.argv: list[tuple[list[str], str]] = []
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT),
                    "KILN_WORKER_STORE": str(self.dir / "worker-store")}
        ray = str(Path(sys.executable).parent / "ray")
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"]
        try:
            self._start([ray, "start", "--head", f"--port={self.port}", "--num-cpus=1", "--resources",
                         json.dumps({"head": 1}), "--include-dashboard=false", f"--temp-dir={self.dir / 't'}",
                         f"--ray-client-server-port={free_port()}", f"--dashboard-port={free_port()}",
                         f"--dashboard-agent-listen-port={free_port()}", *common], "head")
            self.wait(1)
            for i, resources in enumerate(workers):
                self._start([ray, "start", f"--address={self.address}", "--num-cpus=2", f"--memory={worker_memory}",
                             "--resources", json.dumps(resources), f"--dashboard-agent-listen-port={free_port()}",
                             *common], f"worker{i}")
            self.wait(1 + len(workers))
        except BaseException:
            self.stop()
            raise

    def _start(self, argv: list[str], name: str) -> None:
        self.argv.append((argv, name))
        self.procs.append(self._popen(argv, name))

    def _popen(self, argv: list[str], name: str) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                                cwd=self.dir)
        log.close()
        return proc

    def wait(self, nodes: int) -> None:
        """Until the cluster has `nodes` live nodes (asked with `ray status`-like GCS calls in a child)."""
        probe = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
                 "print(sum(n['Alive'] for n in ray.nodes()))")
        deadline = time.monotonic() + START_S
        starts = [1] * len(self.procs)
        while time.monotonic() < deadline:
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    if starts[i] >= NODE_STARTS:
                        raise RuntimeError("a Ray node exited: " + self.logs())
                    self._kill(p)
                    starts[i] += 1
                    self.procs[i] = self._popen(*self.argv[i])
            out = subprocess.run([sys.executable, "-c", probe, self.address], capture_output=True, text=True,
                                 env=self.env, timeout=START_S)
            if out.returncode == 0 and out.stdout.strip().isdigit() and int(out.stdout.strip()) >= nodes:
                return
            time.sleep(1)
        raise RuntimeError(f"the Ray cluster did not reach {nodes} nodes in {START_S:g}s: " + self.logs())

    def logs(self) -> str:
        return " | ".join(p.read_text(errors="replace")[-800:] for p in sorted(self.dir.glob("*.log")))

    def pgids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def workers(self) -> dict[int, str]:
        """pid -> title of the worker processes of this cluster's nodes (each in a session of its own,
        a child of a node's raylet)."""
        out = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if os.getpgid(ppid) in self.pgids():
                    out[int(d.name)] = (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except (OSError, ValueError, IndexError, ProcessLookupError):
                continue
        return out

    @staticmethod
    def _kill(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        workers = self.workers()  # before their raylets go: then they are no longer known as this cluster's
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.procs:
                self._kill(p, sig)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                time.sleep(0.2)
        for p in self.procs:
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
