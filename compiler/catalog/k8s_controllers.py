"""What the controllers a Kubernetes release meets do with its objects (catalog/data/k8s_controllers.json):
GPU Feature Discovery's product label, the Dynamo webhook's forbidden updates, Argo CD's and the MIG
manager's rules. Below both the emitters (compiler/targets/kubernetes/) and the checks, so each reads one table."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from compiler import resources


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(resources.read_data("catalog", "data", "k8s_controllers.json"))


# --- GPU Feature Discovery ----------------------------------------------------------------------------
def _sanitise(part: str) -> str:
    """GFD's sanitise: drop what is not [A-Za-z0-9-_. ], then join the words with '-'."""
    return "-".join(re.sub(table()["gfd"]["sanitise_removes"], "", part).split())


def gpu_product_label(product: str, strategy: str, mig_profile: str | None) -> str:
    """The value GFD writes to nvidia.com/gpu.product on a node whose GPUs are `product` under the
    cluster's MIG `strategy`: under `single` a MIG node's MIG labeler overwrites the full-GPU one with
    `<product>-MIG-<profile>` (the profile as GFD sanitises it: `1g.10gb+me` -> `1g.10gbme`); under
    `mixed` and `none` the key keeps the bare product."""
    pattern = table()["gfd"]["product_by_strategy"][strategy]
    if mig_profile is None:
        return product
    return pattern.format(product=product, profile=_sanitise(mig_profile))


def product_key() -> str:
    return table()["gfd"]["product_key"]


# --- Dynamo's admission webhook -------------------------------------------------------------------------
@dataclass(frozen=True)
class ForbiddenUpdate:
    id: str
    what: str
    message: str
    since: str
    status: str
    note: str
    source: str

    def applies(self, version: str) -> bool:
        def key(v: str) -> tuple[int, ...]:
            return tuple(int(x) for x in re.findall(r"\d+", v)[:2])
        return key(version) >= key(self.since)

    def cite(self, version: str) -> str:
        caveat = "" if self.status == "verified" else f"; {self.status} in {version}"
        return f"Dynamo webhook: {self.what} is refused ('{self.message}'{caveat})"


def forbidden_updates(version: str) -> dict[str, ForbiddenUpdate]:
    """The updates Dynamo `version`'s webhook refuses on a live DynamoGraphDeployment, by rule id."""
    hook = table()["dynamo_webhook"]
    out = {}
    for r in hook["forbidden_updates"]:
        rule = ForbiddenUpdate(r["id"], r["what"], r["message"], r["since"], r["status"], r.get("note", ""),
                               hook["source"])
        if rule.applies(version):
            out[rule.id] = rule
    return out


def grove_name_max() -> int:
    return table()["dynamo_webhook"]["grove_combined_name_max"]


def rolling_update_annotations() -> tuple[str, str]:
    ru = table()["dynamo_webhook"]["rolling_update"]
    return ru["max_surge"], ru["max_unavailable"]


def dynamo_rollout() -> dict:
    """How Dynamo's operator rolls a DGD's components on a change (rolling_update: worker types, whether
    the worker hash covers every worker, whether roles roll in an order, and the source)."""
    return table()["dynamo_webhook"]["rolling_update"]


def dynamo_shm_default() -> str:
    return table()["dynamo_webhook"]["shared_memory_default"]


def driver_root() -> str:
    return table()["gpu_operator"]["driver_root"]


def nvidia_smi_places() -> dict:
    """Where a node's nvidia-smi is, in the GPU Operator's two driver modes: `driver_root` and the
    paths under it (the operator's driver container), `host_root` (the host's /, mounted read-only)
    and the paths under it (a driver installed on the host, Helm driver.enabled=false)."""
    op = table()["gpu_operator"]
    return {"driver_root": op["driver_root"], "driver_paths": list(op["driver_root_nvidia_smi"]),
            "host_root": op["host_root"], "host_paths": list(op["host_nvidia_smi"])}


# --- Kubernetes image volumes (weights mounted from their own image) --------------------------------------
def _minor(version: str) -> tuple[int, int]:
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return major, minor


def image_volume() -> dict:
    return table()["kubernetes"]["image_volume"]


def image_volume_support(version: str) -> str:
    """What a cluster of Kubernetes `version` (MAJOR.MINOR) does with a pod's `volumes[].image`:
    `default` (beta, on by default), `gate` (beta, only with the ImageVolume feature gate on the API
    server and the kubelets) or `none` (absent, or alpha)."""
    iv = image_volume()
    if _minor(version) >= _minor(iv["on_by_default"]):
        return "default"
    if _minor(version) >= _minor(iv["beta_off_by_default"]):
        return "gate"
    return "none"
