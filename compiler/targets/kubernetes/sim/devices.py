"""What a node advertises for a MIG layout under the cluster's MIG strategy: GPU Feature Discovery's
product label and the device plugin's extended resources, ported from

  NVIDIA/gpu-feature-discovery internal/lm/mig-strategy.go (migStrategySingle.Labels, the
  mixed and none labelers), its cases in internal/lm/mig-strategy_test.go TestMigStrategySingleLabels;
  NVIDIA/k8s-device-plugin v0.20.0 internal/rm (the single strategy's check that every MIG device
  of a node is one type, else no device is advertised; rm.go AddDefaultResourcesToConfig: the mixed
  strategy's resource `nvidia.com/mig-<profile>` with `+` written `.`) and internal/lm/resource.go
  (product naming, compiler/catalog/k8s_controllers.py gpu_product_label).

`devices`: per GPU of a node, a Counter of MIG profiles (empty: MIG disabled, a whole GPU), or None
for a GPU in MIG mode with no instance. Left out: the memory/engine labels, `none` with MIG enabled
(Kiln never emits it), MIG devices that fail health checks.
"""

from __future__ import annotations

from collections import Counter

from compiler.catalog import k8s_controllers

GPU = "nvidia.com/gpu"


def gpus_of(entries: list[dict], gpus: int) -> list[Counter | None]:
    """Per GPU index the instances a mig-parted layout gives (its entries in order; a later entry
    for the same GPU wins, as mig-parted applies them)."""
    out: list[Counter | None] = [Counter() for _ in range(gpus)]
    for e in entries:
        idx = range(gpus) if e.get("devices", "all") == "all" else e["devices"]
        for i in idx:
            if i >= gpus:
                continue
            if e.get("mig-enabled"):
                devices = Counter(e.get("mig-devices") or {})
                out[i] = devices if devices else None
            else:
                out[i] = Counter()
    return out


def single_profile(devices: list[Counter | None]) -> str | None | bool:
    """TestMigStrategySingleLabels: no MIG GPU -> False (full-GPU labels); exactly one MIG type on
    every GPU, each in MIG mode with instances -> that profile; anything else (two types, a MIG GPU
    beside a whole one, a MIG GPU without instances) -> None: `<product>-MIG-INVALID`, count 0."""
    mig = [d for d in devices if d is None or d]
    if not mig:
        return False
    if len(mig) != len(devices) or any(d is None for d in mig):
        return None
    profiles = {p for d in mig for p in d}
    return next(iter(profiles)) if len(profiles) == 1 else None


def advertised(strategy: str, devices: list[Counter | None]) -> Counter:
    """The device plugin's extended resources: whole GPUs as nvidia.com/gpu; MIG instances as
    nvidia.com/mig-<profile> (mixed) or nvidia.com/gpu (single, only when single_profile finds one
    type; an invalid node advertises none)."""
    res: Counter = Counter()
    if strategy == "single":
        one = single_profile(devices)
        if one is None:
            return res
        for d in devices:
            res[GPU] += 1 if one is False else sum(d.values())
        return res
    for d in devices:
        if d is None:
            continue
        if not d:
            res[GPU] += 1
        for prof, n in d.items():
            if strategy == "mixed":  # internal/rm/rm.go AddDefaultResourcesToConfig: `+` written `.`
                res["nvidia.com/mig-" + prof.replace("+", ".")] += n
    return res


def product_label(product: str, strategy: str, devices: list[Counter | None]) -> str:
    """nvidia.com/gpu.product: under `single` `<product>-MIG-<profile>` or `<product>-MIG-INVALID`."""
    if strategy != "single":
        return product
    one = single_profile(devices)
    if one is False:
        return product
    if one is None:
        return f"{product}-MIG-INVALID"
    return k8s_controllers.gpu_product_label(product, "single", one)
