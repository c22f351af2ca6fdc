"""`kiln plan` and `kiln build` as library calls: validate, lower, then plan or execute."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from compiler.graph.builder import Builder, Selection
from compiler.graph.executor import ActionResult, execute
from compiler.graph.inputs import DigestCache
from compiler.graph.lower import lower
from compiler.graph.manifest import build_manifest
from compiler.graph.model import Graph
from compiler.graph.plan import PlannedAction, make_plan
from compiler.pipeline import Options, Validation, validate_path
from compiler.store.local import LocalStore

DEFAULT_STORE = Path(".kiln/store")


def store_dir(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    env = os.environ.get("KILN_STORE")
    return Path(env) if env else DEFAULT_STORE


def open_store(path: Path) -> LocalStore:
    return LocalStore(path)


@dataclass
class BuildOutcome:
    validation: Validation
    graph: Graph | None = None
    plan: list[PlannedAction] = field(default_factory=list)
    results: dict[str, ActionResult] = field(default_factory=dict)
    manifest: bytes | None = None
    manifest_digest: str | None = None
    disruptions: list = field(default_factory=list)  # compiler.graph.disruption.Disruption

    @property
    def failed(self) -> list[ActionResult]:
        return [r for r in self.results.values() if r.status in ("failed", "skipped")]

    @property
    def deferred(self) -> list[ActionResult]:
        return [r for r in self.results.values() if r.status == "deferred"]

    @property
    def complete(self) -> bool:
        return not self.failed and not self.deferred

    @property
    def executed(self) -> list[ActionResult]:
        return [r for r in self.results.values() if r.status in ("built", "failed")]


def _prepare(spec: Path, store: LocalStore, options: Options | None) -> tuple[BuildOutcome, DigestCache]:
    outcome = BuildOutcome(validate_path(spec, options))
    digests = DigestCache(store.root / "digest-cache.json")
    if outcome.validation.ok:
        outcome.graph, _ = lower(outcome.validation, digests)
    return outcome, digests


def plan_spec(spec: Path, store: LocalStore, options: Options | None = None,
              builder: Builder | None = None) -> BuildOutcome:
    outcome, digests = _prepare(spec, store, options)
    if outcome.graph is not None:
        outcome.plan = make_plan(outcome.graph, store, outcome.validation.spec.name,
                                 builder if builder is not None else Builder())
        outcome.disruptions = host_disruptions(outcome.graph, store, outcome.validation.spec.name)
    digests.save()
    return outcome


def host_disruptions(graph: Graph, store: LocalStore, spec_name: str) -> list:
    """What applying this build to each host disrupts, against the host plan last built in this store."""
    from compiler.actions import hostplan
    from compiler.graph.disruption import disruptions

    out = []
    for aid in graph.order:
        action = graph.actions[aid]
        if action.kind != hostplan.KIND:
            continue
        ref = store.get_ref(spec_name, aid)
        if ref is not None and ref["key"] == graph.keys[aid]:
            continue
        old = hostplan.state_from_params(ref["params"]["params"]) if ref is not None else None
        out.extend(disruptions(old, hostplan.state_from_params(dict(action.params))))
    return out


class BadSelection(Exception):
    """An --only/--skip pattern matches no action."""


def gate_figures(store: LocalStore, graph: Graph, trees: dict) -> dict[str, dict]:
    """model -> the quality gate's figures, read from each built quality-gate artifact."""
    import json

    from compiler.actions import quality_gate

    out = {}
    for aid in graph.order:
        action = graph.actions[aid]
        if action.kind != quality_gate.KIND or not trees.get(aid):
            continue
        for entry in store.tree(trees[aid]):
            if entry.path == "quality.json":
                doc = json.loads(store.read_bytes(entry.digest))
                out[action.params["model"]] = {k: doc[k] for k in (
                    "metric", "samples", "unquantized", "quantized", "regression_pct", "max_regression_pct", "passed")}
    return out


def build_spec(spec: Path, store: LocalStore, *, jobs: int = 2, progress=lambda line: None,
               options: Options | None = None, builder: Builder | None = None,
               selection: Selection | None = None, remote=None) -> BuildOutcome:
    """Build what this builder can. Without failures a manifest is written and recorded in the
    store's release history; one with deferred actions says `complete: false` and lists them."""
    outcome, digests = _prepare(spec, store, options)
    if outcome.graph is None:
        return outcome
    digests.save()
    selected = None
    if selection is not None and (selection.only or selection.skip):
        unmatched = selection.unmatched(outcome.graph)
        if unmatched:
            raise BadSelection(f"no action matches {', '.join(map(repr, unmatched))}; actions are: "
                               + ", ".join(outcome.graph.order))
        selected = selection.chosen(outcome.graph)
    name = outcome.validation.spec.name
    outcome.results = execute(outcome.graph, store, name, jobs=jobs, progress=progress, digest_of=digests.digest,
                              builder=builder, selected=selected, remote=remote)
    if not outcome.failed:
        trees = {aid: r.tree for aid, r in outcome.results.items()}
        pending = {r.id: r.error or "deferred" for r in outcome.deferred}
        outcome.manifest = build_manifest(outcome.graph, trees, outcome.validation.spec, outcome.validation.resolved,
                                          pending, gate_figures(store, outcome.graph, trees),
                                          built_images(outcome.graph, trees, store))
        outcome.manifest_digest = store.add_release(name, outcome.manifest)
    return outcome


def built_images(graph: Graph, trees: dict[str, str], store: LocalStore) -> dict[str, dict]:
    """Issue 6: host -> the image/<host> result (reference by digest) for the release manifest."""
    from compiler.actions import image

    return {graph.actions[aid].params["host"]: image.manifest_entry(store, trees[aid])
            for aid in graph.order if graph.actions[aid].kind == image.KIND and trees.get(aid)}
