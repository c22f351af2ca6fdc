"""Builds on a distributed engine the user already runs: each runnable action is submitted as a
task with its needs as the engine's resources, inputs and outputs move by digest through the
registry cache, and the release is written locally, the same as a one-machine build's.

  engine.py   the protocol an engine implements (what a cluster has; submit, wait, cancel)
  connect.py  the engine an --executor address names
  ray.py      Ray, the first engine (`kiln build --executor ray://HOST:PORT`)
  driver.py   the build loop over an engine
  worker.py   what runs one action on a remote machine
"""
