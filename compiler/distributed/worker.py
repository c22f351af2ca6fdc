"""What runs one action on a remote machine, whatever engine put it there (a Ray task; a Kubernetes
Job would run `python -m compiler.distributed.worker JOB.json` the same way).

Everything moves by digest through the registry cache (compiler/gitops/cache.py): the job names the
action's kind, parameters and key, the digests of its input files and the (kind, key) of each
dependency's artifact. The worker fetches each of them into a store of its own, verifying every
blob against its digest, runs the kind, stores the output tree and pushes it as the action's
artifact (blobs first, the manifest last: the artifact exists only whole). It returns the tree's
digest; the driver imports the artifact from the registry, verified again, before it enters the
local store. The job also names the way the action runs in (GPUs, offload, CPU: the one its node
was chosen for); the action obeys it, or refuses where this machine cannot run it. A worker that
dies leaves at most unreferenced blobs in the registry and a scratch directory in its own store,
never an artifact or a record.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

JOB_VERSION = 2  # 2: the job names the way the action runs in (`way`, compiler/graph/sizes.py Way)


def default_store() -> Path:
    """The worker's own store: $KILN_WORKER_STORE, else one per user under the temporary directory."""
    env = os.environ.get("KILN_WORKER_STORE")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"kiln-worker-store-{os.getuid()}"


def _kind(job: dict):
    from compiler.targets.registry import REGISTRY

    return REGISTRY[job["kind"]]


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one action (see the module docstring); {"tree", "duration_s", "log", "node"}. Raises
    with the action's error; the log so far is in the message's tail."""
    from compiler.gitops import artifacts as oa
    from compiler.gitops.cache import RemoteCache
    from compiler.gitops.oci import Registry
    from compiler.gitops.publish import push_artifact
    from compiler.graph.kinds import RunContext
    from compiler.graph.sizes import Way
    from compiler.store.local import LocalStore

    if job.get("version") != JOB_VERSION:
        raise RuntimeError(f"job version {job.get('version')!r}: this worker runs version {JOB_VERSION}")
    store = LocalStore(Path(job.get("store") or default_store()))
    cache = RemoteCache(Registry.parse(job["registry"]), store, warn=lambda line: None)
    repo = cache.repo
    kind = _kind(job)
    params = kind.Params.model_validate(job["params"])
    start = time.monotonic()
    logger = logging.getLogger(f"kiln.worker.{job['id']}.{job['key'][7:19]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    with store.lock(exclusive=False), store.workdir("job-") as work:
        handler = logging.FileHandler(work / "action.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        try:
            logger.info("action %s\nkind %s v%d\nkey %s\nnode %s", job["id"], job["kind"], job["kind_version"],
                        job["key"], os.uname().nodename)
            way = Way.from_json(job["way"]) if job.get("way") else None
            if way is not None:
                logger.info("way %s (%s)", way.short(), way.text())
            deps = {}
            for dep, (dep_kind, dep_key) in sorted(job["deps"].items()):
                record = store.get_action(dep_key) or cache._fetch(dep_kind, dep_key, dep)
                if record is None:
                    raise RuntimeError(f"{dep}: its artifact {oa.artifact_tag(dep_kind, dep_key)} is not in the cache")
                target = work / "deps" / dep.replace("/", "__")
                store.materialize(record.tree, target)
                deps[dep] = target
            files = {}
            for role, (digest, size, name) in sorted(job["files"].items()):
                if not store.has_valid_blob(digest, size):
                    with open(work / "blob", "wb") as f:  # verified against its digest while it streams
                        cache.client.fetch_blob(repo, digest, f, size)
                    if store.put_file(work / "blob") != digest:
                        raise RuntimeError(f"input {role}: content does not match {digest}")
                dest = work / "files" / role / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "wb") as out:
                    store.copy_blob(digest, out)
                files[role] = dest
            out = work / "out"
            out.mkdir()
            kind.run(params, RunContext(out, files, deps, logger, way=way))
            tree = store.put_tree(out)
            duration = round(time.monotonic() - start, 3)
            logger.info("done in %.3fs, tree %s", duration, tree)
            push_artifact(cache.client, store, repo, job["kind"], job["kind_version"], job["key"], tree)
            return {"tree": tree, "duration_s": duration, "log": _read(work / "action.log"),
                    "node": os.uname().nodename}
        except Exception as e:
            logger.exception("failed: %s", e)
            raise RuntimeError(f"{type(e).__name__}: {e}\n--- log tail ---\n{_read(work / 'action.log')[-4000:]}") \
                from None
        finally:
            handler.close()
            logger.removeHandler(handler)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    """`python -m compiler.distributed.worker JOB.json`: run the job, print its result as JSON."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m compiler.distributed.worker JOB.json", file=sys.stderr)
        return 2
    try:
        result = run_job(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    except Exception as e:  # the job's failure, reported; the engine sees the exit status
        print(f"kiln worker: {e}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in result.items() if k != "log"}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
