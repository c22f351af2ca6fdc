"""The simulation as the plan shows it: whether the change completes (or where it sticks, and why),
how long it takes, each model's fewest ready pods during it and for how long, and the timeline.
Text, Markdown and JSON are three forms of the same `Result`; the diagnostics (K858 the change
does not complete, K859 a model has no ready pod during it) come from it too."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .engine import Result, defaults

STUCK_CODE, FLOOR_CODE = "K858", "K859"


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
            lowest, since, span = r.low.get(m, (end, 0.0, 0.0))
            line = f"{m}: {b} -> {end} ready (wants {want})"
            if b and lowest < b:
                line += f"; lowest {lowest} ({100 * lowest // b}%) from +{_t(since)} for {_t(span)}"
            out.append(line)
        return out

    def text(self) -> str:
        lines = [f"Rollout on the cluster (simulated; a pod is Ready {defaults()['pod_load_s']} s after it is "
                 f"scheduled, a stated default): {self.headline()}"]
        lines += [f"  {x}" for x in self.model_lines()]
        lines.append("  Steps:")
        lines += [f"    +{_t(s.t):<7} {s.text}" for s in self.result.steps]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = ["### Rollout (simulated)", "", f"**{self.headline()}**", ""]
        lines += [f"- {x}" for x in self.model_lines()]
        lines += ["", "<details><summary>Steps</summary>", "", "| at | step |", "|---|---|"]
        lines += [f"| +{_t(s.t)} | {s.text.replace('|', chr(92) + '|')} |" for s in self.result.steps]
        lines += ["", "</details>"]
        return "\n".join(lines)

    def json(self) -> dict:
        r = self.result
        return {"completed": r.completed, "stuck": r.stuck, "duration_s": r.duration_s, "before": self.before,
                "desired": r.desired, "end": r.end,
                "lowest": {m: {"ready": v[0], "from_s": v[1], "for_s": v[2]} for m, v in r.low.items()},
                "steps": [{"t": s.t, "text": s.text, "ready": s.ready} for s in r.steps]}

    def annotate(self, disruptions: list) -> list:
        """The plan's per-workload lines (`<name>: ...` of a node pool) with what the simulation found:
        the workload the change sticks on says so, so no line promises a rollout that never ends."""
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

    def diagnostics(self) -> list[tuple[str, str, str]]:
        """(code, message, help) for the plan."""
        out = []
        if not self.result.completed:
            out.append((STUCK_CODE, f"the change does not complete on the cluster: {self.result.stuck}",
                        "see the simulated rollout in the plan; change the edit (or split it) so that every "
                        "rollout has room: fewer replicas per node, a pool with a free node, or the change in "
                        "two merges"))
        for m in self.floor_breaches():
            lowest, since, span = self.result.low[m]
            out.append((FLOOR_CODE, f"model {m!r} has no ready pod from +{_t(since)} for {_t(span)} during the change",
                        "keep one node's worth of the model elsewhere while its pods move (a second pool or "
                        "shape), or apply the change in a maintenance window"))
        return out
