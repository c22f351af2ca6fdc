"""`kiln render`: a spec's Kubernetes tree written for review, with no weights, Docker or image.

The tree is the `k8s-release` artifact's, made by the same actions a build runs (the node layer,
the workloads, the LLM-API options a DynamoGraphDeployment carries), except that each pool's
serving image and each model's weights image, which only a build with the weights, Docker and the
runtime image can make, are placeholders: `kiln-placeholder.invalid/<image action>:unbuilt`. The
`.invalid` top-level domain is reserved (RFC 2606) and never resolves, so no registry can serve an image under that name (a
bare `kiln-placeholder/...` would be a Docker Hub name anyone could claim).

It must never pass for a release: nothing is written to the store, no release manifest is
written, every object carries the NOT_DEPLOYABLE annotation (through the tree's own release stamp),
every YAML file starts with a comment saying so, and a RENDERED-FOR-REVIEW file sits at the root.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from compiler.actions import image as image_kind
from compiler.actions import weights_image
from compiler.targets.kubernetes.k8s_release import KIND as RELEASE
from compiler.store.digests import DigestCache
from compiler.graph.kinds import KindRegistry, RunContext
from compiler.graph.model import Graph
from compiler.lower import lower_or_report
from compiler.pipeline import Options, Validation, validate_path
from compiler.targets.registry import REGISTRY
from compiler.targets.kubernetes import tree
from compiler.targets.kubernetes.k8s_release import KIND as RELEASE

PLACEHOLDER_REGISTRY = "kiln-placeholder.invalid"
PLACEHOLDER_TAG = "unbuilt"
NOT_DEPLOYABLE = "kiln.io/not-deployable"
NOTE = ("rendered for review by `kiln render`: the images are placeholders (kiln-placeholder.invalid/...:unbuilt); "
        "not a release, do not apply")
MARKER = "RENDERED-FOR-REVIEW"
LOG = logging.getLogger("kiln.render")
# the images a review cannot build, by kind -> the file its push records: each pool's serving image
# and each model's weights image (a placeholder reference in an image volume is as unpullable)
PLACEHOLDERS = {image_kind.KIND.kind: image_kind.OUTPUT, weights_image.KIND.kind: weights_image.OUTPUT}


class RenderError(Exception):
    """The spec cannot be rendered (it has no node pools, or an action needs what a review cannot have)."""


def placeholder(image_action: str) -> dict:
    """The image.json of an image that was not built (what `image/<pool>` records after a push)."""
    name = image_action.replace("/", "-")
    return {"reference": f"{PLACEHOLDER_REGISTRY}/{name}:{PLACEHOLDER_TAG}",
            "digest": f"{PLACEHOLDER_TAG}:{name}", "placeholder": True}


def _needed(graph: Graph) -> list[str]:
    """The actions the Kubernetes tree is made from, in build order, not looking past an image."""
    seen: set[str] = set()
    stack = [RELEASE.kind]
    while stack:
        aid = stack.pop()
        if aid in seen:
            continue
        seen.add(aid)
        if graph.actions[aid].kind not in PLACEHOLDERS:
            stack.extend(graph.actions[aid].deps)
    return [aid for aid in graph.order if aid in seen]


def render_tree(graph: Graph, work: Path, kinds: KindRegistry = REGISTRY) -> Path:
    """Run the tree's actions under `work`; the directory of the finished tree."""
    if RELEASE.kind not in graph.actions:
        raise RenderError("the spec has no node pools (hosts with `deploy: kubernetes`): there is no Kubernetes "
                          "tree to render")
    dirs: dict[str, Path] = {}
    for aid in _needed(graph):
        action = graph.actions[aid]
        out = work / "parts" / aid.replace("/", "__")
        out.mkdir(parents=True)
        if action.kind in PLACEHOLDERS:
            (out / PLACEHOLDERS[action.kind]).write_text(json.dumps(placeholder(aid)), encoding="utf-8")
        else:
            # what a review cannot have (a GPU, Docker, the network) must not be reached from the tree
            if action.needs or action.files:
                raise RenderError(f"{aid} needs {', '.join(action.needs) or 'input files'}: the tree cannot be "
                                  "rendered without a build")
            kinds[action.kind].run(action.params, RunContext(out, {}, {d: dirs[d] for d in action.deps}, LOG))
        dirs[aid] = out
    return dirs[RELEASE.kind]


def _mark(root: Path, spec_name: str, spec_digest: str) -> None:
    """Say on every file and object that this tree is for review only."""
    stamp = tree.release_stamp(spec_name, spec_digest)
    stamp["annotations"][NOT_DEPLOYABLE] = NOTE
    (root / tree.STAMP).write_text(tree.dump(stamp), encoding="utf-8")
    header = f"# NOT DEPLOYABLE: {NOTE}\n"
    for path in sorted(root.rglob("*.yaml")):
        path.write_text(header + path.read_text(encoding="utf-8"), encoding="utf-8")
    (root / MARKER).write_text(
        f"This tree was {NOTE}.\n\nIts images are {PLACEHOLDER_REGISTRY}/<image action>:{PLACEHOLDER_TAG}, a name no "
        "registry serves. A deployable tree is the k8s-release artifact of `kiln build` (with the images built and "
        "pushed): `kiln export SPEC --to DIR --only k8s-release`.\n", encoding="utf-8")


def render_spec(spec: Path, to: Path, options: Options | None = None) -> tuple[Validation, Path | None]:
    """(the validation, the tree's directory or None when the spec has errors). `to` must not exist or
    be an empty directory; the tree is made beside it and renamed into place, so an interrupted
    render leaves nothing that looks finished."""
    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise RenderError(f"{to} exists and is not an empty directory; render into a new one")
    result = validate_path(spec, options)
    with tempfile.TemporaryDirectory(prefix="kiln-render-") as scratch:
        graph = lower_or_report(result, DigestCache(None))
        if graph is None:
            return result, None
        built = render_tree(graph, Path(scratch))
        release = graph.actions[RELEASE.kind].params
        _mark(built, release.spec_name, release.spec_digest)
        to.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{to.name}.", dir=to.parent))
        try:
            staging.chmod(0o755)  # mkdtemp's 0700 would hide the tree from the reviewers it is for
            shutil.copytree(built, staging, dirs_exist_ok=True, symlinks=True)
            if to.is_dir():
                to.rmdir()
            os.replace(staging, to)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return result, to
