"""`kiln tune`: measure a serving unit's batch limit under the model's SLA with AIPerf and record it
beside the spec (compiler/tune)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import STORE_HELP, require_file
from .errors import UsageError
from .exitcodes import ExitCode
from .output import print_diagnostics

STYLES = ("smooth_isotonic", "monotonic", "grid")  # compiler.tune.aiperf.STYLES (checked by a test)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _percent(ratio: float) -> str:
    pct = ratio * 100
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="measure a unit's largest concurrency under the model's sla with AIPerf; "
                                    "record it beside the spec and point limits.max_batch_size at it")
    p.add_argument("spec", type=Path, metavar="SPEC")
    p.add_argument("--unit", required=True, metavar="ID", help="the serving unit, as `kiln plan` lists it "
                                                               "(e.g. dev-h100/gpu0/mig0)")
    p.add_argument("--url", required=True, help="the unit's OpenAI-compatible endpoint, e.g. http://10.0.0.5:8000")
    p.add_argument("--aiperf", metavar="PATH", help="the aiperf executable (default: $KILN_AIPERF, else PATH)")
    p.add_argument("--style", choices=STYLES, default="smooth_isotonic",
                   help="AIPerf's search style (default smooth_isotonic, which also reports cliffs), or grid: "
                        "a sweep of --grid-points log-spaced concurrencies that Kiln judges")
    p.add_argument("--max-concurrency", type=_positive, metavar="N",
                   help="search no higher than N (the unit's capacity bound always caps the search)")
    p.add_argument("--grid-points", type=_positive, default=8, metavar="N", help="points of the grid style (8)")
    p.add_argument("--requests", type=_positive, metavar="N",
                   help="requests per probe (default: AIPerf's for the style)")
    p.add_argument("--seed", type=int, default=7, help="AIPerf's random seed for the synthetic prompts (7)")
    p.add_argument("--served-name", metavar="NAME", help="the model name the endpoint serves (default: the "
                                                         "spec's model name)")
    p.add_argument("--tokenizer", metavar="DIR|REPO", help="tokenizer AIPerf counts tokens with (default: the "
                                                           "model's local source or Hugging Face repository)")
    p.add_argument("--output", type=Path, metavar="DIR", help="where AIPerf's outputs are kept (default: "
                                                              ".kiln/tune/<unit>-<time>)")
    p.add_argument("--record", type=Path, metavar="FILE", help="the record to write (default: tune/<unit>.json "
                                                               "beside the spec)")
    p.add_argument("--no-write-spec", action="store_true",
                   help="write the record only; leave limits.max_batch_size in the spec as it is")
    p.add_argument("--allow-non-monotonic", action="store_true",
                   help="accept a result where a concurrency passed above one that failed (the limit is the "
                        "largest passing one below the first failure)")
    p.add_argument("--allow-cliff", action="store_true", help="accept a boundary AIPerf reports as a cliff")
    p.add_argument("--image-digest", metavar="DIGEST", help="the digest of the image the unit serves (default: "
                                                            "the image this store built for the spec)")
    p.add_argument("--store", type=Path, help=STORE_HELP)
    p.add_argument("--no-gpu-query", action="store_true", help="do not ask nvidia-smi for the GPU's clocks and power")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop AIPerf after this long")
    p.add_argument("--aiperf-arg", action="append", default=[], metavar="ARG",
                   help="a further argument for `aiperf profile` (repeat it; e.g. --aiperf-arg=--gpu-telemetry "
                        "--aiperf-arg=pynvml)")
    p.set_defaults(handler=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> ExitCode:
    from compiler.tune.aiperf import AiperfNotFound
    from compiler.tune.session import TuneError, TuneOptions, tune

    require_file(args.spec)
    extra = list(args.aiperf_arg)
    opts = TuneOptions(spec=args.spec, unit=args.unit, url=args.url, aiperf=args.aiperf, style=args.style,
                       max_concurrency=args.max_concurrency, grid_points=args.grid_points, requests=args.requests,
                       seed=args.seed, served_name=args.served_name, tokenizer=args.tokenizer, outputs=args.output,
                       record=args.record, write_spec=not args.no_write_spec,
                       allow_non_monotonic=args.allow_non_monotonic, allow_cliff=args.allow_cliff,
                       image_digest=args.image_digest, store=args.store, gpu_query=not args.no_gpu_query,
                       timeout_s=args.timeout, extra=tuple(extra))
    try:
        out = tune(opts, progress=lambda line: print(line, flush=True))
    except AiperfNotFound as e:
        raise UsageError(str(e)) from None
    except TuneError as e:
        if e.validation is not None:
            print_diagnostics([e.validation], stream=sys.stderr)
        print(f"kiln tune: {e}", file=sys.stderr)
        return ExitCode.ERRORS
    r = out.record.result
    bound = out.record.search.capacity_bound
    print(f"measured: {r.concurrency} concurrent requests meet the SLA on {out.record.unit}"
          + (f" ({r.binding_constraint} fails at {r.first_failing})" if r.first_failing else
             " (the top of the search range still passed)")
          + f"; modelled capacity bound {bound:,} ({_percent(r.concurrency / bound)} of it)")
    if out.limit is not None:
        print(f"batch limit: {out.limit} ({out.derivation})")
    print(f"{len(r.probes)} probes in {out.wall_s:,.0f} s; AIPerf's outputs are in {out.outputs}")
    print(f"wrote {out.record_path}" + (f"; {args.spec} now refers to it" if out.spec_edited else ""))
    if out.validation.diagnostics:
        print_diagnostics([out.validation], stream=sys.stderr)
    return ExitCode.OK if out.validation.ok else ExitCode.ERRORS
