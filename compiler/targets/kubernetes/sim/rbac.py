"""Which API calls a kubectl command makes, and whether a Role's rules allow them: the calls are data
(catalog/data/k8s_controllers.json `kubectl_calls`, each with the kubectl source it was read from);
the matching is kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go RuleAllows
(apiGroups, resources incl. subresources as `res/sub`, verbs, resourceNames; `*` matches any)."""

from __future__ import annotations

from compiler.catalog import k8s_controllers


def allows(rules: list[dict], group: str, resource: str, verb: str, name: str = "") -> bool:
    for r in rules:
        if not ({"*", group} & set(r.get("apiGroups", []))):
            continue
        if not ({"*", resource} & set(r.get("resources", []))):
            continue
        if not ({"*", verb} & set(r.get("verbs", []))):
            continue
        names = r.get("resourceNames") or []
        if names and name not in names:
            continue
        return True
    return False


def denied(rules: list[dict], command: str, name: str = "") -> list[str]:
    """The calls of `command` (a key of kubectl_calls) the rules refuse, as `verb group/resource`."""
    out = []
    for call in k8s_controllers.table()["kubectl_calls"][command]["calls"]:
        group, resource, verb = call["group"], call["resource"], call["verb"]
        if not allows(rules, group, resource, verb, name if call.get("named") else ""):
            out.append(f"{verb} {group + '/' if group else ''}{resource}")
    return out
