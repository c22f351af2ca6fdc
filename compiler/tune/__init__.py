"""`kiln tune` as a library: drive AIPerf's SLA search against a serving unit and turn its result
into a measurement record (compiler/ir/measured.py) that the spec's limits can refer to.

  aiperf.py    the AIPerf command line for a unit's SLA and workload (AIPerf runs as a subprocess,
               never imported: it has dependencies of its own and a release cadence of its own)
  results.py   AIPerf's output files -> the search result (feasible maximum, boundary, probes)
  gpu.py       what nvidia-smi reports about the measured GPU, when it is reachable
  specedit.py  point `limits.max_batch_size` at the record, editing only that value of the spec text
  session.py   one `kiln tune` run: plan, run with progress, check, record
"""
