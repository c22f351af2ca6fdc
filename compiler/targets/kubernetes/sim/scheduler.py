"""kube-scheduler's filter and score for the pods Kiln emits, ported from kubernetes/kubernetes
pkg/scheduler/framework/plugins (release-1.3x):

  nodeunschedulable/node_unschedulable.go  a cordoned node (spec.unschedulable) takes no pod that
                                           does not tolerate node.kubernetes.io/unschedulable
  tainttoleration/taint_toleration.go      every NoSchedule/NoExecute taint must be tolerated
                                           (v1helper.TolerationsTolerateTaint: Exists matches any value)
  nodeaffinity/node_affinity.go            spec.nodeSelector: every key equal on the node's labels
  noderesources/fit.go                     requests of each extended resource within the node's
                                           allocatable minus what its pods request
  noderesources/least_allocated.go         score: the least requested share wins; ties by node name
                                           (upstream breaks ties at random: a fixed order keeps the
                                           simulation deterministic)

Left out: cpu/memory fit (nodes' allocatable are not in the spec), affinity and topology spread
(Kiln emits none), preemption (no priority classes), the queue's backoff (a Pending pod is retried
at every event).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


def tolerates(tolerations: list[dict], taint: Taint) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("key") not in (None, "", taint.key):
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.value:
            return True
    return False


@dataclass
class NodeView:
    name: str
    labels: dict
    allocatable: Counter
    requested: Counter = field(default_factory=Counter)
    unschedulable: bool = False
    taints: list = field(default_factory=list)


def fits(node: NodeView, selector: dict, tolerations: list[dict], requests: dict) -> str | None:
    """None when the pod fits; else the plugin's reason, as the scheduler's event says it."""
    if node.unschedulable and not tolerates(tolerations, Taint(UNSCHEDULABLE_TAINT)):
        return "node(s) were unschedulable"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    for res, n in requests.items():
        if node.allocatable.get(res, 0) - node.requested.get(res, 0) < n:
            return f"Insufficient {res}"
    return None


def score(node: NodeView, requests: dict) -> float:
    """least_allocated.go: the mean free share over the requested resources (higher is better)."""
    shares = [(node.allocatable[r] - node.requested.get(r, 0) - n) / node.allocatable[r]
              for r, n in requests.items() if node.allocatable.get(r)]
    return sum(shares) / len(shares) if shares else 0.0


def place(nodes: list[NodeView], selector: dict, tolerations: list[dict], requests: dict) -> tuple[str | None, Counter]:
    """(the chosen node, or None with the reasons counted as `0/N nodes are available: ...`)."""
    reasons: Counter = Counter()
    best = None
    for n in sorted(nodes, key=lambda n: n.name):
        why = fits(n, selector, tolerations, requests)
        if why is not None:
            reasons[why] += 1
            continue
        s = score(n, requests)
        if best is None or s > best[0]:
            best = (s, n.name)
    return (best[1] if best else None), reasons
