"""Admission under load on the llmapi target's Triton model (not a test): the quickstart's
repository in the CPU `tritonserver`, with the stand-in LLM (tests/fakes/llmapi: in-flight
batching, one token per active request per iteration of at least KILN_STANDIN_STEP_MS).

Closed-loop clients (more than the model's max_batch_size) each send one request after another.
Reported: requests served and rejected (queue full, queue timeout), latency, and the concurrency
the LLM actually held, sampled from the stand-in's own admission/finish events, against the limit
(limits.max_batch_size, which is also the model's admission cap, max_inflight_requests).

Run from the repository root: python3 benchmarks/bench_llmapi_admission.py [--clients 16] [--seconds 20]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_llmapi_serving import CAPACITY, LONG, request, serve, standin_events  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=2 * CAPACITY)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = serve(Path(tmp))
        try:
            results: list[tuple[int, float, str]] = []
            lock = threading.Lock()
            stop_at = time.monotonic() + args.seconds
            mark = len(standin_events(server))

            def client() -> None:
                while time.monotonic() < stop_at:
                    started = time.monotonic()
                    status, body = server.infer("tiny", request(LONG, args.tokens))
                    with lock:
                        results.append((status, time.monotonic() - started, body.get("error", "")))

            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            events = standin_events(server)[mark:]
        finally:
            server.stop()
    held = [int(m.group(1)) for e in events if (m := re.search(r"in flight: (\d+)", e))]
    served = [latency for status, latency, _ in results if status == 200]
    full = sum(1 for status, _, error in results if status != 200 and "queue size" in error)
    timeouts = sum(1 for status, _, error in results if status != 200 and "timeout" in error.lower())
    print(f"clients {args.clients}, limit (max_batch_size) {CAPACITY}, {args.tokens} tokens a request, "
          f"{args.seconds:.0f} s")
    print(f"served {len(served)}, rejected: queue full {full}, queue timeout {timeouts}, "
          f"other {len(results) - len(served) - full - timeouts}")
    if served:
        q = statistics.quantiles(served, n=20)
        print(f"latency s: median {statistics.median(served):.2f}, p95 {q[-1]:.2f}, max {max(served):.2f}")
    if held:
        print(f"concurrency the LLM held (at its {len(held)} admit/finish events): mean {statistics.mean(held):.2f}, "
              f"max {max(held)}, at the limit {sum(h == CAPACITY for h in held) / len(held):.0%} of events")


if __name__ == "__main__":
    main()
