"""`kiln plan` and `kiln build` as library calls: validate, lower, then plan or execute."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

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
    def executed(self) -> list[ActionResult]:
        return [r for r in self.results.values() if r.status in ("built", "failed")]


def _prepare(spec: Path, store: LocalStore, options: Options | None) -> tuple[BuildOutcome, DigestCache]:
    outcome = BuildOutcome(validate_path(spec, options))
    digests = DigestCache(store.root / "digest-cache.json")
    if outcome.validation.ok:
        outcome.graph, _ = lower(outcome.validation, digests)
    return outcome, digests


def plan_spec(spec: Path, store: LocalStore, options: Options | None = None) -> BuildOutcome:
    outcome, digests = _prepare(spec, store, options)
    if outcome.graph is not None:
        outcome.plan = make_plan(outcome.graph, store, outcome.validation.spec.name)
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


def build_spec(spec: Path, store: LocalStore, *, jobs: int = 2, progress=lambda line: None,
               options: Options | None = None, remote=None) -> BuildOutcome:
    outcome, digests = _prepare(spec, store, options)
    if outcome.graph is None:
        return outcome
    digests.save()
    name = outcome.validation.spec.name
    outcome.results = execute(outcome.graph, store, name, jobs=jobs, progress=progress, digest_of=digests.digest,
                              remote=remote)
    if not outcome.failed:
        trees = {aid: r.tree for aid, r in outcome.results.items()}
        outcome.manifest = build_manifest(outcome.graph, trees, outcome.validation.spec, outcome.validation.resolved)
        outcome.manifest_digest = store.add_release(name, outcome.manifest)
    return outcome
