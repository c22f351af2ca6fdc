"""The simulation as the plan shows it: whether the change completes (or where it sticks, and why),
how long it takes, each model's fewest ready pods during it and for how long, and the timeline.
Text, Markdown and JSON are three forms of the same `Result`; the diagnostics (K858 the change
does not complete, K859 a model has no ready pod during it, K450 a model's pods on a pool fall below
the floor its PodDisruptionBudgets declare) come from it too."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .engine import Result, defaults

STUCK_CODE, FLOOR_CODE, BELOW_FLOOR_CODE = "K858", "K859", "K450"
# K450's fix per cause (ChangeSimulation._below_family); {model}, {pool}
BELOW_FLOOR_FIX = {
    "relayout": "the re-layout Job takes a node batch's pods (what the budget allows) while the rollout takes "
                "more: serve part of {model} from another device shape or node pool, so a node of {pool} holds "
                "less of it; or raise {pool}'s node_pool.max_unavailable knowingly (the declared floor is then "
                "lower); or apply the change in a maintenance window",
    "prune": "Argo CD prunes a workload of {model} whose name the change gives away: run `kiln lock` on the base "
             "revision and commit it, then make this change on top (the names stay, K954)",
    "reshape": "{model}'s Deployment on {pool} takes out more of its pods at once than its budgets let a "
               "disruption take (its rolling update's maxUnavailable: where the pods change shape, the old pods "
               "of whole nodes go before a new one fits, k8s_deployment.reshape_unavailable): give the pool a free "
               "node so that the new pods surge, or change the shape in a maintenance window; without a kiln.lock "
               "committed on the base revision, commit one first (its \"pods\" pace the roll to the pool's "
               "max_unavailable nodes)",
    "worker": "{model}'s workers on {pool} roll by their operator's pace (Grove: one pod at a time; Dynamo: the "
              "component's surge/unavailable), beside what else takes pods: give the pool a free node's devices "
              "so the workers surge, or apply the change in a maintenance window",
    "": "split the change so fewer of {model}'s pods are out at once, or apply it in a maintenance window",
}
# K858's fix per cause (engine.Result.stuck_family); {what}: the object the sync waits on, {pool}: its pool
STUCK_FIX = {
    "reshape": "{what}'s pods change shape on {pool}, which has no room to surge, and its pace lets no old "
               "pod go before a new one fits: nothing records the old pods. Run `kiln lock` on the base revision "
               "and commit it, then make this change on top: the lock's \"pods\" pace it so that the old pods "
               "of the pool's max_unavailable nodes go first (k8s_deployment.reshape_unavailable)",
    "room": "{what}'s new pods find no free device on {pool} (see the Pending reasons): give the pool room "
            "(fewer replicas per node, another node in node_pool.nodes) or split the change in two merges so that "
            "no other workload takes the devices its old pods free",
    "worker-room": "{what}'s new pods find no free device on {pool}, and its operator's rolling update may "
                   "not retire an old worker first: give the pool a free node's devices for a surge worker, or "
                   "split the change in two merges",
    "selector": "no node carries {pool}'s node_pool.selector, so {what}'s pods can never be scheduled: label "
                "the pool's nodes with it, or set the selector to labels they carry",
    "budget": "the re-layout Job's evictions on {pool} are refused by the PodDisruptionBudgets of the workloads "
              "the cause names: a node's worth of each one's pods must be what its budget lets go (its "
              "maxUnavailable follows node_pool.max_unavailable); move pods off the nodes first, or split the MIG "
              "change from the workloads' change",
    "job": "the re-layout Job fails on {pool} (see its cause in the rollout): fix what the cause names, and "
           "rerun the sync",
    "pod-security": "the API server refuses {what}'s pods under its namespace's Pod Security level: the node "
                    "tuning DaemonSet runs privileged and as root, in a namespace that enforces `privileged` (the "
                    "GPU Operator's), as Kiln emits it",
    "webhook": "Dynamo's webhook refuses a changed set of a DynamoGraphDeployment's components (the model's "
               "shapes and roles): it must be deleted and re-created, its model serving nothing meanwhile (K855)",
    "immutable": "the field is immutable: the object must be deleted and re-created (Argo CD's Replace=true "
                 "sync option, or by hand before the sync), or the field kept",
    "": "see the simulated rollout in the plan; change the edit (or split it) so that every rollout has room",
}


def _dip(before: int, low: tuple) -> str:
    lowest, since, span = low
    return f"; lowest {lowest} ({100 * lowest // before}%) from +{_t(since)} for {_t(span)}" \
        if before and lowest < before else ""


def promise(detail: str) -> tuple[int, int] | None:
    """(X, N) of a roll line's "at least X of N stay ready" ("all N stay ready": N, N); None: no promise."""
    found = re.search(r"at least (\d+) of (\d+) stay ready|all (\d+) stay ready", detail)
    if found is None:
        return None
    return (int(found.group(1)), int(found.group(2))) if found.group(1) else (int(found.group(3)),) * 2


def duration(seconds: float) -> str:
    """"45s", "3m00s", "1h05m": how the plan writes a span of simulated time."""
    return _t(seconds)


def _t(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


@dataclass
class ChangeSimulation:
    result: Result

    @property
    def before(self) -> dict:
        return self.result.before

    def floor_breaches(self) -> list[str]:
        """Models served before and after the change that have no ready pod at some point."""
        low = self.result.low
        return [m for m in sorted(self.before) if self.before[m] > 0 and self.result.desired.get(m, 0) > 0
                and low.get(m, (1,))[0] == 0]

    def headline(self) -> str:
        r = self.result
        if r.completed:
            return f"completes in {_t(r.duration_s)}"
        return f"does NOT complete (stuck after {_t(r.duration_s)}): {r.stuck}"

    def model_lines(self) -> list[str]:
        r = self.result
        out = []
        for m in sorted(set(self.before) | set(r.desired)):
            b, want, end = self.before.get(m, 0), r.desired.get(m, 0), r.end.get(m, 0)
            out.append(f"{m}: {b} -> {end} ready (wants {want})" + _dip(b, r.low.get(m, (end, 0.0, 0.0))))
        return out

    def pool_lines(self, pool: str) -> list[str]:
        """A pool's share: each of its models' ready pods on its nodes before and after, the fewest during
        the change and for how long; whether the object the change sticks on (K858) is in it."""
        r = self.result
        before, end, low = r.pool_before.get(pool, {}), r.pool_end.get(pool, {}), r.pool_low.get(pool, {})
        out = []
        for m in r.pools.get(pool, []):
            b, e = before.get(m, 0), end.get(m, 0)
            out.append(f"{m} on this pool: {b} -> {e} ready" + _dip(b, low.get(m, (e, 0.0, 0.0))))
        if pool in r.tuning_failed:
            out.append(f"clocks and power NOT applied on its nodes (kiln.io/gpu-tuning=failed): {r.tuning_failed[pool]}")
        if not r.completed and r.stuck_on is not None:
            kind, _, name = r.stuck_on
            out.append(f"the change sticks on {kind} {name} ({STUCK_CODE}), "
                       + ("in this pool" if r.stuck_pool == pool else
                          f"in node pool {r.stuck_pool}" if r.stuck_pool else "the cluster's, not a pool's"))
        return out

    def sections(self) -> list[tuple[str, list]]:
        return [(heading, steps) for _, heading, steps in self._sections()]

    def _sections(self) -> list[tuple[str | None, str, list]]:
        """(pool, heading, steps): the timeline a section per node pool (its heading: the pool, its models, when its last step
        happens), after the cluster's own steps (Argo CD's waves, the re-layout Job's); a pool where
        nothing happens says so."""
        r = self.result
        steps = r.steps
        out = []
        cluster = [s for s in steps if s.pool is None]
        if cluster:
            out.append((None, "Cluster (Argo CD's sync waves, the re-layout Job)", cluster))
        for pool in sorted(set(r.pools) | {s.pool for s in steps if s.pool is not None}):
            mine = [s for s in steps if s.pool == pool]
            models = ", ".join(r.pools.get(pool, [])) or "no model"
            settled = self._settled(r.pools.get(pool, []), mine[-1].t if mine else 0.0)
            when = ("nothing happens" if not mine else f"settled at +{_t(settled)}" if settled is not None
                    else "does NOT settle: its models never reach their ready count")
            out.append((pool, f"Node pool {pool} ({models}): {when}", mine))
        return out

    def _settled(self, models: list, after: float) -> float | None:
        """When the models' ready pods reach their end count for good (the pool's last step at the
        earliest); None when a model ends short of what the new revision asks."""
        r = self.result
        if any(r.end.get(m, 0) < r.desired.get(m, 0) for m in models):
            return None
        samples = [(st.t, st.ready) for st in r.steps] + [(r.duration_s, r.end)]
        when = after
        for m in models:
            since = None
            for t, ready in samples:
                since = (since if since is not None else t) if ready.get(m, 0) == r.end.get(m, 0) else None
            when = max(when, since if since is not None else r.duration_s)
        return when

    def text(self) -> str:
        lines = [f"Rollout on the cluster (simulated; a pod is Ready {defaults()['pod_load_s']} s after it is "
                 f"scheduled, a stated default): {self.headline()}"]
        lines += [f"  {x}" for x in self.model_lines()]
        for pool, heading, steps in self._sections():
            lines.append(f"  {heading}")
            lines += [f"    {x}" for x in (self.pool_lines(pool) if pool is not None else [])]
            lines += [f"    +{_t(s.t):<7} {s.text}" for s in steps]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = ["### Rollout (simulated)", "", f"**{self.headline()}**", ""]
        lines += [f"- {x}" for x in self.model_lines()]
        for pool, heading, steps in self._sections():
            mine = [f"- {x}" for x in (self.pool_lines(pool) if pool is not None else [])]
            if not steps:
                lines += ["", f"{heading}", *([""] + mine if mine else [])]
                continue
            lines += ["", f"<details><summary>{heading}</summary>", "", *mine, *([""] if mine else []),
                      "| at | step |", "|---|---|"]
            lines += [f"| +{_t(s.t)} | {s.text.replace('|', chr(92) + '|')} |" for s in steps]
            lines += ["", "</details>"]
        return "\n".join(lines)

    def json(self) -> dict:
        r = self.result
        return {"completed": r.completed, "stuck": r.stuck, "duration_s": r.duration_s, "before": self.before,
                "desired": r.desired, "end": r.end,
                "lowest": {m: {"ready": v[0], "from_s": v[1], "for_s": v[2]} for m, v in r.low.items()},
                "pools": r.pools,
                "per_pool": {p: {"before": r.pool_before.get(p, {}), "end": r.pool_end.get(p, {}),
                                 "lowest": {m: {"ready": v[0], "from_s": v[1], "for_s": v[2]} for m, v in low.items()}}
                             for p, low in r.pool_low.items()},
                "stuck_pool": r.stuck_pool, "tuning_failed": r.tuning_failed,
                "steps": [{"t": s.t, "text": s.text, "ready": s.ready, "pool": s.pool} for s in r.steps]}

    def annotate(self, disruptions: list) -> list:
        """The plan's per-workload lines (`<name>: ...` of a node pool) with what the simulation found:
        a roll whose promise ("at least X of N stay ready", the rollout arithmetic alone) the simulation
        breaks says its simulated lowest and why (the re-layout Job's evictions run beside the roll);
        the workload the change sticks on says so, so no line promises a rollout that never ends; a
        workload whose rollout settings alone changed says what its PodDisruptionBudget now allows."""
        disruptions = [self._floor(d) for d in self._budgets(disruptions)]
        on = self.result.stuck_on
        if on is None or on[0] not in ("Deployment", "DynamoGraphDeployment"):
            return disruptions
        note = f"; simulated: does NOT complete, the sync waits on it ({STUCK_CODE}, see the rollout)"
        out, said = [], set()
        for d in disruptions:
            name = d.detail.split(":", 1)[0]
            if d.pool and d.kind in ("workload-roll", "replicas") and on[2] in (name, name.split("/", 1)[0]) \
                    and name not in said:  # once per workload, on its first line
                said.add(name)
                d = replace(d, detail=d.detail + note)
            out.append(d)
        return out

    def _floor(self, d):
        """A roll line whose promise is above the simulated lowest of its model's pods on its pool."""
        promised = promise(d.detail) if d.pool and d.kind == "workload-roll" else None
        model = self.result.models.get(d.detail.split(":", 1)[0].replace("/", "-"))
        low = self.result.pool_low.get(d.host, {}).get(model) if promised is not None else None
        if low is None or low[0] >= promised[0]:
            return d
        lowest, since, span = low
        why = self._cause(d.host, model, lowest, since)
        return replace(d, detail=f"{d.detail}; simulated: lowest {lowest} of {promised[1]} for {_t(span)}"
                                 + (f", {why}" if why else ""))

    def _cause(self, pool: str, model: str, lowest: int, since: float) -> str:
        """The step that took the model's pods on the pool down to their fewest, worded as what runs."""
        was = self.result.pool_before.get(pool, {}).get(model, 0)
        for st in self.result.steps:
            now = st.by_pool.get(pool, {}).get(model, 0)
            if st.t == since and now == lowest and now < was:
                evicts = re.match(r"re-layout Job: node (\S+): evicted ", st.text)
                if evicts:
                    return f"while the re-layout Job evicts node {evicts.group(1)}"
                prunes = re.match(r"Argo CD prunes (.+)$", st.text)
                if prunes:
                    return f"while Argo CD prunes {prunes.group(1)} (its pods stop at once)"
                return f"at the step: {st.text}"
            was = now
        return ""

    def _budgets(self, disruptions: list) -> list:
        # a budget the change widens or narrows (the simulation's step names it namespace/<workload>)
        budgets = {st.text.split(":", 1)[0].split("/", 1)[-1]: st.text.split(": ", 1)[1] for st in self.result.steps
                   if ": a voluntary disruption " in st.text}
        out = []
        for d in disruptions:
            name = d.detail.split(":", 1)[0]
            if d.pool and d.kind == "rollout-settings" and name in budgets:
                d = replace(d, detail=f"{d.detail}; its PodDisruptionBudget: {budgets[name]}")
            out.append(d)
        return out

    def moved_services(self) -> list[tuple[str, str, str]]:
        """(name, old namespace, new namespace) of each Service the change moves: its DNS name
        (<name>.<namespace>.svc) changes."""
        return list(self.result.moved_services)

    def diagnostics(self) -> list[tuple[str, str, str]]:
        """(code, message, help) for the plan."""
        out = []
        if not self.result.completed:
            out.append((STUCK_CODE, f"the change does not complete on the cluster: {self.result.stuck}",
                        self._stuck_help()))
        for pool, why in sorted(self.result.tuning_failed.items()):
            out.append((STUCK_CODE, f"node pool {pool!r}: its clocks and power are never applied, every node ends "
                        f"kiln.io/gpu-tuning=failed: {why}",
                        "the node-tuning DaemonSet's container must run as root (runAsUser 0) and privileged (it "
                        "requests no GPU, so only a privileged container opens /dev/nvidia*), in a namespace that "
                        "enforces Pod Security `privileged` (the GPU Operator's): as Kiln emits it"))
        for m in self.floor_breaches():
            lowest, since, span = self.result.low[m]
            out.append((FLOOR_CODE, f"model {m!r} has no ready pod from +{_t(since)} for {_t(span)} during the change",
                        self._floor_help()))
        return out + self._below_floor()

    def _below_floor(self) -> list[tuple[str, str, str]]:
        """K450: a model's ready pods on a pool below the floor its budgets declare there (Result.floors),
        with the step that took them there; not for a model K859 already says has no ready pod."""
        r, zero, out = self.result, set(self.floor_breaches()), []
        for pool, floors in sorted(r.floors.items()):
            for m, floor in sorted(floors.items()):
                low = r.pool_low.get(pool, {}).get(m)
                if m in zero or low is None or low[0] >= floor:
                    continue
                lowest, since, span = low
                why = self._cause(pool, m, lowest, since)
                of = r.pool_before.get(pool, {}).get(m, 0)
                out.append((BELOW_FLOOR_CODE,
                            f"model {m!r} on node pool {pool!r}: lowest {lowest} of {of} ready from +{_t(since)} "
                            f"for {_t(span)}, below the floor of {floor} its PodDisruptionBudgets declare"
                            + (f", {why}" if why else ""),
                            BELOW_FLOOR_FIX[self._below_family(why)].format(model=m, pool=pool)))
        return out

    @staticmethod
    def _below_family(why: str) -> str:
        """The kind of step _cause names, for K450's fix."""
        if why.startswith("while the re-layout Job"):
            return "relayout"
        if why.startswith("while Argo CD prunes"):
            return "prune"
        if "Grove PodClique" in why or "worker generation" in why:
            return "worker"
        return "reshape" if "ReplicaSet" in why else ""

    def _stuck_help(self) -> str:
        """K858's fix, from its cause (Result.stuck_family)."""
        on = self.result.stuck_on
        what = f"{on[0]} {on[2]}" if on else "the object the sync waits on"
        pool = f"node pool {self.result.stuck_pool!r}" if self.result.stuck_pool else "its node pool"
        return STUCK_FIX.get(self.result.stuck_family, STUCK_FIX[""]).format(what=what, pool=pool)

    def _floor_help(self) -> str:
        """K859's fix, from its cause: a MIG strategy flip has no order that keeps a model on its pool."""
        if self.result.strategy:
            was, now = self.result.strategy
            return (f"the change flips the GPU Operator's MIG strategy {was} -> {now} (`kubernetes.mig_strategy` "
                    "unset is the least that serves every pool): the device plugin advertises each re-laid-out "
                    "node's MIG devices under the new strategy's resource names, which the old pods do not "
                    "request, so no order of the sync keeps the model served on this pool; keep the strategy "
                    f"(`kubernetes.mig_strategy: {was}`" + (", which advertises a one-profile pool too" if was == "mixed"
                                                            else "") + "), or apply the change in a maintenance window")
        return ("keep one node's worth of the model elsewhere while its pods move (a second pool or shape), or apply "
                "the change in a maintenance window")
