"""Rendering a spec's Kubernetes tree in tests, without building models or images.

The k8s actions (and the LLM-API options they read) run for real; the one input that needs a
GPU-scale build is each pool's pushed image and each model's weights image, so `image/<pool>` and
`weights-image/<model>` are given as the JSON a push records, with a digest derived from that
action's key: an image whose key does not change keeps its digest, as a real registry would
(tests/test_image.py builds real images on the quickstart).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
from pathlib import Path

from ruamel.yaml import YAML

from compiler.store.digests import DigestCache
from compiler.graph.kinds import RunContext
from compiler.graph.model import Graph
from compiler.lower import lower
from compiler.pipeline import validate_path, validate_text
from compiler.targets.registry import REGISTRY

LOG = logging.getLogger("k8s-tree")
PUSHED = {"image": "image.json", "weights-image": "weights-image.json"}  # kind -> what its push records


def graph_of(spec: Path, work: Path, text: str | None = None) -> Graph:
    work.mkdir(parents=True, exist_ok=True)
    result = validate_text(text, spec.parent, spec.name) if text is not None else validate_path(spec)
    assert result.ok, "\n".join(f"{d.span.line}:{d.span.column} {d.code} {d.message}" for d in result.diagnostics)
    return lower(result, DigestCache(work / "digests.json"))


def image_json(graph: Graph, aid: str) -> dict:
    digest = "sha256:" + hashlib.sha256(graph.keys[aid].encode()).hexdigest()
    repo = graph.actions[aid].params.repository
    return {"reference": f"{repo}@{digest}", "digest": digest}


def render(graph: Graph, work: Path) -> Path:
    """Run the k8s actions of `graph` (and what they read); the k8s-release tree's directory."""
    dirs: dict[str, Path] = {}
    for aid in graph.order:
        action = graph.actions[aid]
        if not (action.kind.startswith("k8s-")
                or action.kind in ("image", "weights-image", "llmapi-options", "disagg-options")):
            continue
        out = work / "parts" / aid.replace("/", "__")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if action.kind in PUSHED:
            (out / PUSHED[action.kind]).write_text(json.dumps(image_json(graph, aid)), encoding="utf-8")
        else:
            REGISTRY[action.kind].run(action.params, RunContext(out, {}, {d: dirs[d] for d in action.deps}, LOG))
        dirs[aid] = out
    return dirs["k8s-release"]


def tree_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def kustomize(root: Path) -> list[dict]:
    """`kubectl kustomize` of a tree: the objects it builds."""
    proc = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [d for d in YAML(typ="safe", pure=True).load_all(proc.stdout) if d]
