"""The Kubernetes target: pure builders from the IR's node pools (compiler/ir/pools.py) to the
objects of a release's Kustomize tree. The action kinds `k8s-node-layer`, `k8s-deployment`,
`k8s-dgd` and `k8s-release` (compiler/targets/kubernetes/k8s_*.py) call them and write the files.

  meta.py       names, labels, annotations, the pinned Kubernetes version
  runtime.py    what a serving container runs and how it is probed, per serving runtime
  nodelayer.py  GPU Operator node layer: mig-parted ConfigMap, ClusterPolicy patch, node labels,
                node tuning (clocks, power); mig-parted's own parsing rules
  workloads.py  runtime `deployment`: Deployment, PodDisruptionBudget, Service
  dynamo.py     runtime `dynamo`: DynamoGraphDeployment (nvidia.com/v1beta1) and its options ConfigMap
  tree.py       the Kustomize tree, the release stamp, Argo CD's Application and health check
  plan.py       what replacing a node layer or a workload does to a pool (kiln plan)
  k8s_*.py      the action kinds above
"""
