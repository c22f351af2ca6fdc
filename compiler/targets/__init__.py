"""What each deploy target builds: its action kinds and emitters, a package each
(compiler/targets/hosts/, compiler/targets/kubernetes/), the build's kind registry (registry.py)
and how a plan words a disruption (disruption.py).

The target objects, which say what a target deploys and where (the protocol, `of(host)`, `DEPLOYS`),
are compiler/deploy/: the spec, the analysis and the checks ask them and never reach this package,
which reads the IR and builds. This module imports nothing and re-exports nothing (one name per
thing): importing any module here runs it, so it must stay empty of imports.

A new target is a package here (its action kinds in `kinds.py`), one module under compiler/deploy/
(its object, listed in `TARGETS`) and its lines in registry.py.
"""
