"""Refit the performance estimate's coefficients (compiler/capacity/estimate.py) from published rows.

    PYTHONPATH=. python scripts/fit_estimates.py [--rows tests/data/perf/trtllm-published-throughput.json]
        [--out compiler/capacity/data/estimate_coefficients.json] [--date YYYY-MM-DD]

Every row of the file whose model and GPU are in Kiln's catalog is used; nothing is chosen by hand.
The output keeps, per GPU generation x precision x TensorRT-LLM release (and pooled per generation x
precision and overall), the coefficients, the residuals on the rows fitted and the ranges they span,
with the source file's digest, the date and this script's name; and the throughput interval
calibrated on left-out groups (compiler/capacity/estimate_calibrate.py).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.capacity.estimate import FEATURES  # noqa: E402
from compiler.capacity.estimate_calibrate import calibrate  # noqa: E402
from compiler.capacity.estimate_fit import fit_groups, published_case  # noqa: E402

ROWS = Path("tests/data/perf/trtllm-published-throughput.json")
OUT = Path("compiler/capacity/data/estimate_coefficients.json")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=Path, default=ROOT / ROWS)
    p.add_argument("--out", type=Path, default=ROOT / OUT)
    p.add_argument("--date", default=datetime.date.today().isoformat())
    args = p.parse_args(argv)
    raw = args.rows.read_bytes()
    doc = json.loads(raw)
    cases, skipped = [], []
    for row in doc["rows"]:
        case = published_case(row)
        (cases if case is not None else skipped).append(case if case is not None else row)
    groups = fit_groups(cases)
    out = {
        "schema_version": 1,
        "features": list(FEATURES),
        "provenance": {
            "script": "scripts/fit_estimates.py",
            "date": args.date,
            "rows_file": ROWS.as_posix(),
            "rows_sha256": hashlib.sha256(raw).hexdigest(),
            "rows_used": len(cases),
            "rows_skipped": [f"{r['doc_version']} {r['model']} {r['gpu']}" for r in skipped],
            "what": doc.get("what"),
            "sources": {k: v["source"] for k, v in doc.get("sources", {}).items()},
            "fit": "least squares of the relative time error, coefficients at or above their floors "
                   "(compiler/capacity/estimate_fit.py); residuals are ln(observed/predicted) on the rows fitted",
        },
        "groups": groups,
        "interval": calibrate(cases),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for key, g in groups.items():
        r = g["residuals"]
        print(f"{key:22} rows {r['rows']:4}  median |error| {r['median_abs_error']:.3f}  "
              f"within 25% {r['within_25pct']:.2f}")
    print(f"wrote {args.out} ({len(cases)} rows used, {len(skipped)} skipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
