"""Admission under load on the engine target's BLS model (not a test): the quickstart's streaming
repository in the CPU `tritonserver`, with the stand-in engine of tests/test_triton_server.py (it
takes every request at once, as the TensorRT-LLM backend's enqueue() does, and generates them side
by side, 10 ms per requested token).

Closed-loop clients (more than the model's max_batch_size) each send one request after another to
`<model>-bls`. Reported: requests served and rejected (queue full, queue timeout), latency, and the
concurrency the engine actually held, from the stand-in's own start/finish events, against the
limit (limits.max_batch_size, the BLS's admission cap max_inflight_requests).

Run from the repository root: python3 benchmarks/bench_bls_admission.py [--clients 16] [--seconds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_triton_server import PROMPT, stream_answers, streaming_repository  # noqa: E402
from tests.tritonserver import TritonServer  # noqa: E402

LIMIT = 8  # the quickstart's limits.max_batch_size


def engine_concurrency(log: str) -> list[int]:
    """The number of requests the engine held, after each of its start/finish events."""
    held, now = [], 0
    for line in log.splitlines():
        if "kiln-engine-standin: generating" in line:
            now += 1
        elif "kiln-engine-standin: done" in line or "kiln-engine-standin: cancelled while generating" in line:
            now -= 1
        else:
            continue
        held.append(now)
    return held


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=2 * LIMIT)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = TritonServer(streaming_repository(Path(tmp)), Path(tmp))
        try:
            server.wait_live()
            mark = len(server.log())
            results: list[tuple[bool, float, str]] = []
            lock = threading.Lock()
            stop_at = time.monotonic() + args.seconds

            def client() -> None:
                while time.monotonic() < stop_at:
                    started = time.monotonic()
                    _, error = stream_answers(server, "tiny-bls", PROMPT, stream=False, max_tokens=args.tokens)
                    with lock:
                        results.append((error is None, time.monotonic() - started, error or ""))

            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            held = engine_concurrency(server.log()[mark:])
        finally:
            server.stop()
    served = [latency for ok, latency, _ in results if ok]
    full = sum(1 for ok, _, error in results if not ok and "queue size" in error)
    timed_out = sum(1 for ok, _, error in results if not ok and "timeout" in error.lower())
    other = len(results) - len(served) - full - timed_out
    print(f"clients {args.clients}, {args.seconds:.0f} s, {args.tokens} tokens per request, limit {LIMIT}")
    print(f"served {len(served)}, rejected: queue full {full}, queue timeout {timed_out}, other errors {other}")
    if served:
        print(f"latency: median {statistics.median(served):.2f} s, max {max(served):.2f} s")
    if held:
        print(f"engine concurrency: mean {statistics.mean(held):.2f} at its start/finish events, max {max(held)}")


if __name__ == "__main__":
    main()
