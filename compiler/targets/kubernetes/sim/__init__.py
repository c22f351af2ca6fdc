"""The Kubernetes change simulator: what a change of a Kiln tree does to a running fleet, step by
step, computed by ports of the controllers that decide it (each module cites its upstream):

  deployment.py  the Deployment controller's rolling update (kubernetes rolling.go, deployment_util.go)
  dynamo.py      Dynamo's operator rolling a DGD's workers (dgd_worker_rollout_reconciler.go)
  grove.py       Grove rolling a PodClique: a DGD's worker on the Grove pathway (rollingupdate.go)
  scheduler.py   kube-scheduler's filters and least-allocated score for extended resources
  disruption.py  PodDisruptionBudget status and the Eviction API
  devices.py     GPU Feature Discovery's product label and the device plugin's resources per strategy
  migmanager.py  the GPU Operator's MIG manager (mig-parted) on a node's label
  argocd.py      gitops-engine's sync order: waves, kinds, reversed prune waves, PruneLast
  rbac.py        kubectl's API calls against a Role's rules
  podsecurity.py Pod Security admission of a DaemonSet's pods, and what their commands need (root, caps, devices)
  engine.py      the discrete-event loop, and the re-layout Job's script step by step
  model.py       what it reads; tree.py reads it from a tree's documents

Nothing here touches a cluster; `simulate(base, new, pools)` is pure and deterministic.
"""

from .engine import Result, Simulation, simulate  # noqa: F401
from .model import PoolNodes, Revision, Workload  # noqa: F401
