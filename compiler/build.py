"""`kiln plan` and `kiln build` as library calls: validate, lower, then plan or execute."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from compiler.graph.builder import Builder, Selection
from compiler.graph.executor import ActionResult, Interrupt, execute
from compiler.store.digests import DigestCache
from compiler.graph.kinds import KindRegistry
from compiler.graph.model import Graph
from compiler.graph.plan import PlannedAction, make_plan, spec_diff
from compiler.lower import lower_or_report
from compiler.pipeline import Options, Validation, validate_path
from compiler.release import build_manifest, manifest_sections
from compiler.staleness import keyed_diagnostics
from compiler.store.local import LocalStore
from compiler.deploy import BY_DEPLOY, DEPLOYS, DISRUPTION_ORDER
from compiler.targets.disruption import POOL, Disruption
from compiler.targets.registry import REGISTRY, WORDING, disruptions, in_scope

DEFAULT_STORE = Path(".kiln/store")


def project_root(directory: Path) -> Path:
    """The git work tree containing `directory` (a `.git` directory or file marks it: worktrees and
    submodules have a file), else `directory` itself; absolute."""
    start = Path(os.path.abspath(directory))
    for d in (start, *start.parents):
        try:
            if (d / ".git").exists():
                return d
        except OSError:  # a parent we may not look into
            break
    return start


def store_dir(explicit: Path | None, spec: Path | None = None) -> Path:
    """Where the store is: --store, else $KILN_STORE, else `.kiln/store` at the root of the git work
    tree holding the spec (the spec's directory outside git), so every command of one project finds
    the same store from any directory. Without a spec (`kiln store ...`, a release digest) the
    current directory's work tree stands in for the spec's. Relative to the current directory when
    that is the root (as before: `.kiln/store`), absolute otherwise."""
    if explicit is not None:
        return explicit
    env = os.environ.get("KILN_STORE")
    if env:
        return Path(env)
    root = project_root(spec.parent if spec is not None else Path.cwd())
    if root == Path(os.path.abspath(os.curdir)):
        return DEFAULT_STORE
    return root / DEFAULT_STORE


def open_store(path: Path, create: bool = True, missing_ok: bool = False) -> LocalStore:
    """The store at `path` (compiler.store.local.StoreUnusable when it cannot be one). With
    `create=False` (store commands, publish) there must be a store there already; `missing_ok`
    (plan) reads a store that does not exist as empty. Neither creates one."""
    return LocalStore(path, create=create, missing_ok=missing_ok)


@dataclass
class BuildOutcome:
    validation: Validation
    graph: Graph | None = None
    plan: list[PlannedAction] = field(default_factory=list)
    results: dict[str, ActionResult] = field(default_factory=dict)
    manifest: bytes | None = None
    manifest_digest: str | None = None
    disruptions: list[Disruption] = field(default_factory=list)
    interrupted: bool = False  # stopped by an Interrupt: no release was recorded

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


def prepare_spec(spec: Path, store: LocalStore, options: Options | None = None,
                 kinds: KindRegistry = REGISTRY) -> tuple[BuildOutcome, DigestCache]:
    """The spec validated and lowered, once: what plan_spec and build_prepared go on from."""
    outcome = BuildOutcome(validate_path(spec, options))
    # A store that does not exist is not created by reading it (`kiln plan --store X`).
    digests = DigestCache(store.root / "digest-cache.json" if store.root.is_dir() else None)
    outcome.graph = lower_or_report(outcome.validation, digests, kinds)
    if outcome.graph is not None:
        keyed_diagnostics(outcome.validation, digests)  # measured records, by artifact key
    return outcome, digests


def plan_spec(spec: Path, store: LocalStore, options: Options | None = None,
              builder: Builder | None = None, kinds: KindRegistry = REGISTRY) -> BuildOutcome:
    outcome, digests = prepare_spec(spec, store, options, kinds)
    if outcome.graph is not None:
        name = outcome.validation.spec.name
        outcome.plan = make_plan(outcome.graph, store, name, kinds, builder if builder is not None else Builder(),
                                 spec_changes=_spec_changes(outcome.graph, store, name))
        outcome.disruptions = store_disruptions(outcome.graph, store, outcome.validation.spec.name, kinds)
    digests.save()
    return outcome


def _spec_changes(graph: Graph, store: LocalStore, spec_name: str) -> list | None:
    """The spec's own changes since the store's last build of it (from the snapshot's records);
    None when the store has no usable record of that build."""
    from compiler.actions.snapshot import KIND as SNAPSHOT
    snap = graph.actions.get(SNAPSHOT.kind)
    ref = store.get_ref(spec_name, SNAPSHOT.kind)
    if snap is None or ref is None:
        return None
    last = ref["params"].get("params")  # a ref's record, as the store holds it: its shape is not trusted
    return spec_diff(last.get("spec") if isinstance(last, dict) else None, snap.params_json.get("spec"))


def graph_disruptions(graph: Graph, earlier, kinds: KindRegistry) -> list[Disruption]:
    """What replacing earlier builds by this graph's artifacts disrupts on the hosts. `earlier(aid)`
    gives the record ({"key", "params", "version", ...}) of the slot's earlier build, or None."""
    out: list[Disruption] = []
    for aid in graph.order:
        action = graph.actions[aid]
        if action.kind not in WORDING:  # a build input: what consumes it says what its change does
            continue
        record = earlier(aid)
        if record is not None and record.get("key") == graph.keys[aid]:
            continue
        out.extend(disruptions(action.kind, kinds[action.kind].params_from_record(record), action.params,
                               rebuilt_deps(action, record, graph.keys)))
    scopes = host_scopes(graph)
    # a host's lines at its target's scope only: a node pool's serving image is not restarted per GPU
    # (provision.sh's wording); its workloads' rolls say what the new image does
    return merge_disruptions([d for d in out if d.host not in scopes or in_scope(scopes[d.host], d)])


def rebuilt_deps(action, record: dict | None, keys) -> frozenset[str] | None:
    """The dependencies of `action` whose key differs from the earlier build's (its record's "deps");
    None where the record does not say (nothing before, or a record of another shape)."""
    deps = record.get("deps") if record is not None else None
    if not isinstance(deps, dict):
        return None
    return frozenset(d for d in action.deps if deps.get(d) != keys[d])


def host_scopes(graph: Graph) -> dict[str, str]:
    """Each spec host's disruption scope: its deploy target's (from the graph's snapshot of the spec)."""
    from compiler.actions.snapshot import KIND as SNAPSHOT

    snap = graph.actions.get(SNAPSHOT.kind)
    hosts = ((snap.params_json.get("spec") or {}).get("hosts") or {}) if snap is not None else {}
    targets = {name: BY_DEPLOY.get(h.get("deploy") or DEPLOYS[0]) for name, h in hosts.items()}
    return {name: t.disruption_scope for name, t in targets.items() if t is not None}


def merge_disruptions(items: list[Disruption]) -> list[Disruption]:
    """One line per GPU and kind (several artifacts can restart the same containers), one per node
    pool change; a restart is not listed where the GPU is re-sliced or changes what it serves,
    which replaces its containers, nor per GPU of a node pool whose workloads roll."""
    replaced = {(d.host, d.gpu_index) for d in items if d.kind in ("mig-reslice", "serving-change")}
    # a node pool's rolls are said per workload (its POOL lines): a rebuilt serving image's per-GPU
    # "container-restart" lines would count the pool's GPUs as one host's
    pools = {d.host for d in items if d.gpu_index == POOL}
    merged: dict[tuple, Disruption] = {}
    for d in items:
        if d.kind == "container-restart" and ((d.host, d.gpu_index) in replaced
                                              or (d.host in pools and d.gpu_index != POOL)):
            continue
        # a node pool's lines each name their workload: one line each
        key = (d.host, d.gpu_index, d.kind) + ((d.detail,) if d.gpu_index == POOL else ())
        if key in merged:
            d = Disruption(d.host, d.gpu_index, d.kind, merged[key].detail + "; " + d.detail)
        merged[key] = d
    return sorted(merged.values(), key=lambda d: (d.host, d.gpu_index, DISRUPTION_ORDER[d.kind]))


def store_disruptions(graph: Graph, store: LocalStore, spec_name: str, kinds: KindRegistry) -> list[Disruption]:
    """Against what this store last built for the spec."""
    def earlier(aid: str) -> dict | None:
        ref = store.get_ref(spec_name, aid)
        return None if not isinstance(ref, dict) else {"key": ref.get("key"), **(ref.get("params") or {})}

    return graph_disruptions(graph, earlier, kinds)


class BadSelection(Exception):
    """An --only/--skip pattern matches no action."""


def build_spec(spec: Path, store: LocalStore, *, jobs: int = 2, progress=lambda line: None,
               options: Options | None = None, builder: Builder | None = None,
               selection: Selection | None = None, remote=None, kinds: KindRegistry = REGISTRY,
               interrupt: Interrupt | None = None, engine=None) -> BuildOutcome:
    """Build what this builder can, or, with `engine`, run the actions through it instead of the
    local executor (compiler/distributed/driver.py `on_engine`: a distributed engine's machines).
    Without failures a manifest is written and recorded in the store's release history; one with deferred actions says `complete: false` and lists them.
    `interrupt` stops the build (compiler/graph/executor.py); no release is recorded then."""
    outcome, digests = prepare_spec(spec, store, options, kinds)
    return build_prepared(outcome, digests, store, jobs=jobs, progress=progress, builder=builder,
                          selection=selection, remote=remote, kinds=kinds, interrupt=interrupt, engine=engine)


def build_prepared(outcome: BuildOutcome, digests: DigestCache, store: LocalStore, *, jobs: int = 2,
                   progress=lambda line: None, builder: Builder | None = None, selection: Selection | None = None,
                   remote=None, kinds: KindRegistry = REGISTRY, interrupt: Interrupt | None = None,
                   engine=None) -> BuildOutcome:
    """build_spec on a spec prepare_spec validated and lowered (`kiln publish` lowers once)."""
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
    if remote is not None and hasattr(remote, "require"):  # signed inputs, when the spec asks for them
        remote.require(outcome.validation.spec, outcome.validation.base_dir)
    # The shared lock is held from the first cache lookup until the release is recorded: until then
    # nothing in the store references this build's new artifacts, and `kiln store gc` (which takes
    # the lock alone) would remove them.
    interrupt = interrupt if interrupt is not None else Interrupt()
    builder = builder if builder is not None else Builder()
    if builder.machine is None and engine is None:  # this machine's GPUs, memory and free disk under the store
        from compiler.machines import probe

        builder.machine = probe(store.root, ())
    with store.lock():
        # From here an interrupt stops the executor instead of raising, and a release being recorded
        # is recorded whole (the CLI then reports the interrupt all the same).
        interrupt.active = True
        try:
            if engine is not None:  # a distributed engine runs the actions (compiler/distributed/driver.py)
                outcome.results = engine(outcome.graph, store, name, kinds, progress=progress, selected=selected,
                                         interrupt=interrupt)
            else:
                outcome.results = execute(outcome.graph, store, name, kinds, jobs=jobs, progress=progress,
                                          digest_of=digests.digest, builder=builder, selected=selected,
                                          remote=remote, interrupt=interrupt)
            if not outcome.failed and not interrupt.is_set():
                trees = {aid: r.tree for aid, r in outcome.results.items()}
                pending = {r.id: r.error or "deferred" for r in outcome.deferred}
                outcome.manifest = build_manifest(outcome.graph, trees, outcome.validation.resolved, pending,
                                                  manifest_sections(outcome.graph, trees, store, kinds))
                outcome.manifest_digest = store.add_release(name, outcome.manifest)
        finally:
            interrupt.active = False
        outcome.interrupted = interrupt.is_set()
    return outcome
