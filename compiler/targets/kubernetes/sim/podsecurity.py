"""DaemonSet pod security: whether the namespace's Pod Security admission admits a node-layer pod, and
whether, once running, its commands have what they need (root, capabilities, the GPUs' device nodes).
The needs and the levels are data (catalog/data/k8s_controllers.json `pod_security`, with sources);
the checks read the emitted pod template and the script its ConfigMap holds.

Admission is a port of kubernetes v1.34 staging/src/k8s.io/pod-security-admission/policy: the checks
a Kiln pod can meet (check_privileged.go, check_hostNamespaces.go, check_hostPathVolumes.go,
check_capabilities_baseline.go; restricted adds check_restrictedVolumes.go,
check_allowPrivilegeEscalation.go, check_runAsNonRoot.go, check_runAsUser.go,
check_capabilities_restricted.go, check_seccompProfile_restricted.go). Left out: hostPorts, AppArmor,
SELinux, procMount, sysctls and Windows' HostProcess (Kiln's pods set none of them)."""

from __future__ import annotations

import re

from compiler.catalog import k8s_controllers


def table() -> dict:
    return k8s_controllers.table()["pod_security"]


def _containers(spec: dict) -> list[dict]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _ctx(pod: dict, c: dict, field: str):
    """A container's securityContext field, else the pod's (the container's wins, as the kubelet reads it)."""
    own = (c.get("securityContext") or {}).get(field)
    return own if own is not None else (pod.get("securityContext") or {}).get(field)


def level_of(namespace: str, namespaces: dict) -> str:
    """The enforce level of a namespace: its label where the tree holds the Namespace, else the
    admission's default (privileged)."""
    pss = table()["pss"]
    labels = ((namespaces.get(namespace) or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(pss["enforce_label"], pss["default_level"])


def violations(pod: dict, level: str) -> list[str]:
    """What the Pod Security Standard `level` forbids in a pod spec, as the admission's messages name it."""
    pss = table()["pss"]
    if level not in pss["levels"] or level == "privileged":
        return []
    out = []
    cs = _containers(pod)
    # baseline
    if any((c.get("securityContext") or {}).get("privileged") for c in cs):
        out.append("privileged (containers " + ", ".join(
            c["name"] for c in cs if (c.get("securityContext") or {}).get("privileged")) + " must not set "
            "securityContext.privileged=true)")
    host = [f for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    if host:
        out.append("host namespaces (" + ", ".join(f"{f}=true" for f in host) + ")")
    paths = [v["name"] for v in pod.get("volumes") or [] if "hostPath" in v]
    if paths:
        out.append("hostPath volumes (" + ", ".join(paths) + ")")
    allowed = set(pss["baseline_capabilities"])
    added = sorted({cap for c in cs for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
                    if cap not in allowed})
    if added:
        out.append("non-default capabilities (" + ", ".join(added) + ")")
    if level != "restricted":
        return out
    kinds = sorted({k for v in pod.get("volumes") or [] for k in v if k != "name" and k not in pss["restricted_volumes"]})
    if kinds:
        out.append("restricted volume types (" + ", ".join(kinds) + ")")
    for c in cs:
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"allowPrivilegeEscalation != false (container {c['name']})")
        if _ctx(pod, c, "runAsNonRoot") is not True:
            out.append(f"runAsNonRoot != true (container {c['name']})")
        if _ctx(pod, c, "runAsUser") == 0:
            out.append(f"runAsUser=0 (container {c['name']})")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            out.append(f"unrestricted capabilities (container {c['name']} must drop ALL)")
        seccomp = (_ctx(pod, c, "seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"seccompProfile (container {c['name']} must set RuntimeDefault or Localhost)")
    return out


def needs(script: str) -> list[tuple[str, str]]:
    """(need, what) the script's commands need: each command of the table the script runs."""
    out = []
    for cmd in table()["commands"]:
        if any(re.search(cmd["pattern"], line) for line in script.splitlines() if not line.lstrip().startswith("#")):
            out += [(need, cmd["what"]) for need in cmd["needs"]]
    return out


def uid(pod: dict, c: dict) -> int | None:
    """The uid a container runs as: its securityContext's, the pod's, else its image's USER (data);
    None where Kiln cannot know it."""
    found = _ctx(pod, c, "runAsUser")
    if found is not None:
        return int(found)
    ref = str(c.get("image", "")).split("@", 1)[0]
    repo = ref[:ref.rindex(":")] if ":" in ref.rsplit("/", 1)[-1] else ref  # the tag off, a registry's port kept
    return table()["image_users"].get(repo)


def capabilities(pod: dict, c: dict) -> set[str]:
    """The effective capabilities of the container's process: none for a non-root uid (capabilities(7):
    execve clears them, privileged or not); every one where privileged; else the runtime's defaults
    with the container's add and drop."""
    if uid(pod, c) != 0:
        return set()
    sc = c.get("securityContext") or {}
    if sc.get("privileged"):
        return {"ALL"}
    caps = sc.get("capabilities") or {}
    drop = set(caps.get("drop") or [])
    base = set() if "ALL" in drop else set(table()["default_capabilities"]) - drop
    return base | set(caps.get("add") or [])


def failure(pod: dict, c: dict, script: str) -> str | None:
    """Why the container's commands fail on a node, the first need it lacks; None when it has them all."""
    for need, what in needs(script):
        if need == "root" and uid(pod, c) != 0:
            who = _ctx(pod, c, "runAsUser")
            return (f"{what} need root and the container runs as uid {who}" if who is not None else
                    f"{what} need root and the container sets no runAsUser: it runs as its image's user "
                    f"({uid(pod, c) if uid(pod, c) is not None else 'unknown to Kiln'})")
        if need.startswith("cap:"):
            cap = need.split(":", 1)[1]
            have = capabilities(pod, c)
            if "ALL" not in have and cap not in have:
                return f"{what} needs CAP_{cap}, which the container drops"
        if need == "gpu-devices":
            limits = (c.get("resources") or {}).get("limits") or {}
            if not (c.get("securityContext") or {}).get("privileged") and not any(k.startswith("nvidia.com/") for k in limits):
                return (f"{what} open /dev/nvidia*, which an unprivileged container that requests no GPU does not "
                        "have (the device plugin adds only the GPUs a container requests)")
    return None


def daemonset(ds: dict, objects: dict) -> tuple[str | None, str | None]:
    """(why the API server refuses its pods, why its pods' commands fail): a DaemonSet as the tree emits
    it, in the namespace the tree gives it (objects: (kind, namespace, name) -> object)."""
    md, pod = ds["metadata"], ds["spec"]["template"]["spec"]
    namespaces = {k[2]: o for k, o in objects.items() if k[0] == "Namespace"}
    level = level_of(md.get("namespace", ""), namespaces)
    bad = violations(pod, level)
    if bad:
        return (f"the API server refuses its pods: namespace {md.get('namespace', '')} enforces Pod Security "
                f"\"{level}:{table()['pss']['version']}\", which forbids " + "; ".join(bad)
                + "; the DaemonSet controller retries (FailedCreate) and no pod runs"), None
    scripts = {o["metadata"]["name"]: o.get("data") or {} for k, o in objects.items()
               if k[0] == "ConfigMap" and k[1] == md.get("namespace", "")}
    for c in pod.get("containers") or []:
        mounted = {m["name"] for m in c.get("volumeMounts") or []}
        for v in pod.get("volumes") or []:
            if v["name"] not in mounted or "configMap" not in v:
                continue
            for script in (scripts.get(v["configMap"]["name"]) or {}).values():
                why = failure(pod, c, script)
                if why:
                    return None, f"container {c['name']}: {why}"
    return None, None
