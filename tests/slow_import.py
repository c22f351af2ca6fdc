"""A module whose import holds until the test that imports it allows it to end (tests/test_interrupts.py:
an interrupt while the zygote imports what an isolated kind needs). $KILN_TEST_HOLD names a directory:
the import writes `importing` there (with its process id) and `omp-wait-policy` (OpenMP's wait policy
as the zygote's imports see it), and waits for `release` (at most five minutes, longer than the test
waits for anything)."""

import os
import time
from pathlib import Path

_hold = os.environ.get("KILN_TEST_HOLD")
if _hold:
    (Path(_hold) / "omp-wait-policy").write_text(os.environ.get("OMP_WAIT_POLICY", "(unset)"), encoding="utf-8")
    # written whole, then renamed: the test reads the pid as soon as the name exists (under load it
    # read an empty file between write_text's create and its write)
    (Path(_hold) / "importing.tmp").write_text(str(os.getpid()), encoding="utf-8")
    os.replace(Path(_hold) / "importing.tmp", Path(_hold) / "importing")
    _deadline = time.monotonic() + 300
    while not (Path(_hold) / "release").exists() and time.monotonic() < _deadline:
        time.sleep(0.05)
