"""The GPU Operator's MIG manager on one node, ported from NVIDIA/mig-parted v0.15.0:

  cmd/nvidia-mig-manager/main.go   the node informer's UpdateFunc acts only when the value of
                                   nvidia.com/mig.config changes (oldLabel != newLabel, 572-577);
                                   AddFunc (a restarted mig-manager pod) acts on the current value;
                                   removing nvidia.com/mig.config.state is not a change
  pkg/mig/reconfigure/reconfigure.go
                                   state `pending` while it works, then `success` or `failed`;
                                   a name missing from its mounted config file fails first
                                   (validateMigConfig), a layout the GPUs carry succeeds at once
                                   (isConfigAlreadyApplied); it pauses the
                                   operator's own GPU clients only, never user pods
  pkg/mig/config/config.go         ClearMigConfig destroys every instance of a GPU whose layout
                                   changes: one held by a running process fails the apply

Left out: the reboot path (WITH_REBOOT), the operator's clients' restart time, partial applies.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIG_LABEL, STATE_LABEL = "nvidia.com/mig.config", "nvidia.com/mig.config.state"


@dataclass
class MigNode:
    name: str
    label: str  # nvidia.com/mig.config as the node carries it
    applied: str  # the layout the GPUs carry
    state: str = "success"
    busy_until: float | None = None  # a reconfiguration in progress finishes then


def on_label(node: MigNode, new_label: str, now: float, reconfigure_s: float, mounted: dict | None = None) -> bool:
    """The label is set to `new_label`; True when mig-manager acts. `mounted`: the layouts file as its
    pod sees it now (the kubelet refreshes it after a ConfigMap change)."""
    old = node.label
    node.label = new_label
    if old == new_label:
        return False  # UpdateFunc: oldLabel == newLabel, nothing happens (review N8)
    if mounted is not None and new_label not in mounted:
        # reconfigure.go Run: validateMigConfig comes first; a name its file lacks fails, no GPU touched
        node.state, node.busy_until = "failed", None
    elif new_label == node.applied:
        node.state, node.busy_until = "success", None  # reconfigure.go Run: isConfigAlreadyApplied
    else:
        node.state, node.busy_until = "pending", now + reconfigure_s
    return True


def finish(node: MigNode, config: dict, changed_gpus_held: bool) -> str:
    """The reconfiguration's outcome: `config` is the mounted layouts file (name -> entries);
    `changed_gpus_held`: a pod still holds an instance of a GPU whose layout changes."""
    node.busy_until = None
    if node.label not in config or changed_gpus_held:
        node.state = "failed"
    else:
        node.applied, node.state = node.label, "success"
    return node.state
