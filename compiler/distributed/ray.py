"""Ray as a build engine (compiler/distributed/engine.py), for `kiln build --executor ray://HOST:PORT`.

HOST:PORT is the cluster's GCS address, as `ray start --address` takes it; the machine running
`kiln build` must reach the cluster as a node would (KubeRay: run it in a pod of the cluster, or
where the head's port is forwarded). Each action is a Ray task (`kiln:<action id>`) asking for:
  - num_gpus: the GPUs of the way it runs in (a calibration sharded over N GPUs asks for N), and
    the accelerator type of the node that holds it (Ray's `accelerator_type:<T>` resource): an
    engine is built for one architecture, and what each GPU must hold (a calibration's share of the
    model) is known for the node's GPUs, not for any GPU Ray would count;
  - memory: its host memory (Ray's logical `memory` resource, in bytes);
  - a sliver (0.001) of a custom resource per software capability it needs (torch, gpu, docker,
    network, tensorrt_llm): nodes advertise what they have with `ray start --resources '{"torch": 1}'`.
What Ray does not report, Kiln reads from custom resources a node may advertise: `gpu_mem_gib`
(memory per GPU; else the smallest of Kiln's catalog GPUs of the node's accelerator type) and
`disk_gib` (free disk for the worker's store; else not checked).

A task whose worker process dies is retried by Ray (max_retries); an action's own error is not.
Ray is imported only here, only for a build that names it.
"""

from __future__ import annotations

from typing import Any

from compiler.graph.sizes import GiB, Machine, Way
from compiler.machines import SOFTWARE  # the capabilities a node advertises as custom resources

from .engine import EngineError, Finished

MAX_RETRIES = 2  # a task whose worker or node died runs again, twice at most (Ray's own retry)
SLIVER = 0.001  # of a capability resource: any number of tasks may share a node's capability
INSTALL_HINT = "pip install 'kiln-compiler[distributed]' (or scripts/install.sh --distributed)"


def _task(job: dict) -> dict:
    from compiler.distributed.worker import run_job

    return run_job(job)


def _catalog_gpu(accelerator: str):
    """The smallest catalog GPU whose name starts with Ray's accelerator type ("H100" -> H100 ...)."""
    from compiler.catalog import load_gpu_catalog

    found = [g for g in load_gpu_catalog() if g.name.upper().startswith(accelerator.upper())]
    return min(found, key=lambda g: g.memory_mib) if found else None


def machine_of(node: dict) -> Machine:
    """A Ray node (an entry of ray.nodes()) as Kiln's Machine."""
    res = node.get("Resources") or {}
    gpus = int(res.get("GPU", 0))
    types = sorted(k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:"))
    spec = _catalog_gpu(types[0]) if types else None
    mem_each = float(res["gpu_mem_gib"]) if "gpu_mem_gib" in res else (spec.memory_mib / 1024 if spec else 0.0)
    has = {s for s in SOFTWARE if res.get(s, 0) > 0} | ({"gpu"} if gpus else set())
    return Machine(f"ray node {node.get('NodeManagerAddress', '?')} {str(node.get('NodeID', ''))[:8]}", gpus=gpus,
                   gpu_name=types[0] if types else None, gpu_arch=spec.arch if spec else None,
                   gpu_mem_gib=round(mem_each, 1), host_mem_gib=round(float(res.get("memory", 0)) / GiB, 1),
                   disk_gib=float(res["disk_gib"]) if "disk_gib" in res else float("inf"), has=frozenset(has),
                   labels=tuple(types))


def task_options(job: dict, way: Way, label: str, accelerator: str | None = None) -> dict[str, Any]:
    """The Ray task options of a job run in `way` (see the module docstring)."""
    resources = {need: SLIVER for need in job.get("needs", ()) if need in SOFTWARE}
    if accelerator is not None:
        resources[f"accelerator_type:{accelerator}"] = SLIVER
    return dict(name=label, num_cpus=1, num_gpus=way.gpus, memory=int(way.host_mem_gib * GiB), resources=resources,
                max_retries=MAX_RETRIES, retry_exceptions=False)


class RayEngine:
    name = "ray"

    def __init__(self, address: str) -> None:
        try:
            import ray
        except ImportError:
            raise EngineError(f"--executor ray://{address}: Ray is not installed here: {INSTALL_HINT}") from None
        self.ray = ray
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=True,
                     namespace="kiln")
        except Exception as e:  # ConnectionError and Ray's own: the address reaches no cluster
            raise EngineError(f"--executor ray://{address}: cannot join the Ray cluster: {e}") from None
        self.remote = ray.remote(_task)
        self.submitted: list[Any] = []

    def machines(self) -> list[Machine]:
        return [machine_of(n) for n in self.ray.nodes() if n.get("Alive")]

    def submit(self, job: dict, way: Way, label: str, accelerator: str | None = None) -> Any:
        ref = self.remote.options(**task_options(job, way, label, accelerator)).remote(job)
        self.submitted.append(ref)
        return ref

    def wait(self, handles: list, timeout_s: float) -> list[Finished]:
        if not handles:
            return []
        ready, _ = self.ray.wait(handles, num_returns=len(handles), timeout=timeout_s)
        out = []
        for ref in ready:
            try:
                out.append(Finished(ref, result=self.ray.get(ref)))
            except Exception as e:  # the task's error (RayTaskError wraps the worker's), a dead worker, a cancel
                out.append(Finished(ref, error=_message(e)))
        return out

    def cancel(self, handle: Any) -> None:
        try:
            self.ray.cancel(handle, force=True)  # kills the worker process: a forced cancel is not retried
        except Exception:  # already finished, or its worker is already gone
            pass

    def close(self) -> None:
        for ref in self.submitted:
            self.cancel(ref)
        self.ray.shutdown()


def _message(e: BaseException) -> str:
    """A task's error as one readable message: the worker's own error where it raised one."""
    cause = getattr(e, "cause", None)
    if cause is not None and str(cause):
        return str(cause)
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__
