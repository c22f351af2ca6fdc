"""Build a fleet spec on this machine and through a two-worker Ray cluster; print both times and both
release digests (they must be equal). Not a test.

The fleet is tests/test_store.py's generated one (local models, one MIG slice each). By default its
models are served unquantized, so every action is one that any machine holds and both builds are
complete; with --quantized each model is the quickstart's real tiny model quantized to FP8 on the
Ray node that has torch (minutes: each quantization imports torch and ModelOpt in its worker).
The Ray build moves everything through a registry on 127.0.0.1 (Debian's docker-registry, as the
tests run it); its time includes those transfers, not the cluster's start.

Run from the repository root: python3 benchmarks/bench_distributed.py [--models 8] [--quantized]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.build import build_spec  # noqa: E402
from compiler.graph.builder import Builder  # noqa: E402
from compiler.store.local import LocalStore  # noqa: E402
from tests.ray_cluster import RayCluster  # noqa: E402
from tests.services import Registry  # noqa: E402
from tests.test_store import generate_fleet  # noqa: E402

QUANTIZATION = re.compile(r"    quantization:\n      weights: fp8\n      calibration: \{[^}]*\}\n")


def fleet(root: Path, models: int, quantized: bool) -> Path:
    spec = generate_fleet(root, models=models)
    text = spec.read_text(encoding="utf-8")
    if quantized:  # a real model behind each name, calibrated in one small batch
        for d in (root / "models").iterdir():
            shutil.rmtree(d)
            shutil.copytree(ROOT / "examples" / "quickstart" / "model", d)
        text = text.replace("samples: 2000, max_seq_len: 128}", "samples: 8, max_seq_len: 64, batch_size: 8}")
    else:
        text, n = QUANTIZATION.subn("", text)
        assert n == models, "tests/test_store.py's fleet changed; update benchmarks/bench_distributed.py"
    spec.write_text(text, encoding="utf-8")
    return spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--quantized", action="store_true")
    args = ap.parse_args()
    from compiler.distributed.connect import connect
    from compiler.distributed.driver import on_engine
    from compiler.gitops.cache import remote_for

    scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-distributed-"))
    registry = cluster = None
    try:
        spec = fleet(scratch / "spec", args.models, args.quantized)
        has = frozenset({"torch"}) if args.quantized else frozenset()
        start = time.monotonic()
        local = build_spec(spec, LocalStore(scratch / "local"), builder=Builder(fixed=has))
        local_s = time.monotonic() - start
        assert local.complete, [(r.id, r.status, r.error) for r in local.results.values() if r.status != "built"]

        registry = Registry()
        cluster = RayCluster([{"torch": 1}, {"docker": 1}])
        store = LocalStore(scratch / "ray")
        cache = remote_for(registry.host, store)
        engine = connect(f"ray://{cluster.address}")
        try:
            start = time.monotonic()
            remote = build_spec(spec, store, remote=cache, engine=on_engine(engine, cache))
            ray_s = time.monotonic() - start
        finally:
            engine.close()
        assert remote.complete, [(r.id, r.status, r.error) for r in remote.results.values() if r.status != "built"]
        actions = len(local.results)
        print(f"fleet: {args.models} models{' (FP8, quantized)' if args.quantized else ''}, {actions} actions")
        print(f"local (this machine, 2 jobs): {local_s:7.1f} s  release {local.manifest_digest}")
        print(f"ray (head + 2 workers):       {ray_s:7.1f} s  release {remote.manifest_digest}")
        on_driver = sum(r.ran_on == "driver" for r in remote.results.values())
        print(f"  of which built on the driver (small actions): {on_driver}, as Ray tasks: "
              f"{sum(r.status == 'built' for r in remote.results.values()) - on_driver}")
        print("same release" if local.manifest_digest == remote.manifest_digest else "RELEASES DIFFER")
        return 0 if local.manifest_digest == remote.manifest_digest else 1
    finally:
        if cluster is not None:
            cluster.stop()
        if registry is not None:
            registry.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
