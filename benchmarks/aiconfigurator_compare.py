"""Kiln's estimate beside AIConfigurator 0.12 on the published TensorRT-LLM v1.0 rows it can express.

AIConfigurator (NVIDIA's ai-dynamo/aiconfigurator, a per-operation performance database) runs in
a virtual environment of its own, never Kiln's:

    uv venv /tmp/aic && uv pip install --python /tmp/aic/bin/python "aiconfigurator==0.12.*"
    python3 benchmarks/aiconfigurator_compare.py --aic-python /tmp/aic/bin/python [--release 1.0]

For every published row of that release whose GPU AIConfigurator has a system for, both tools
predict output tokens/s at the batch trtllm-bench reaches (estimate_fit.published_case: the KV pool
at isl + osl per request, at most 4096) with the row's tensor parallelism and precision.
AIConfigurator gets a config.json written from Kiln's catalog (no network), its `agg` estimate
(in-flight batching) and its own latest TensorRT-LLM database. Kiln is shown twice: with the
packaged coefficients (which were fitted on these rows) and refitted without the release (the
rows are then unseen, as they are for AIConfigurator). Figures, not a verdict.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = {"H100-SXM5-80GB": "h100_sxm", "H200-SXM-141GB": "h200_sxm", "B200-180GB": "b200_sxm",
           "GB200-186GB": "gb200"}
QUANT = {"FP8": {"gemm_quant_mode": "fp8", "kvcache_quant_mode": "fp8", "fmha_quant_mode": "fp8",
                 "moe_quant_mode": "fp8"},
         "FP4": {"gemm_quant_mode": "nvfp4", "kvcache_quant_mode": "fp8", "fmha_quant_mode": "fp8",
                 "moe_quant_mode": "nvfp4"}}


def hf_config(arch) -> dict:
    """A Hugging Face config.json for a catalog architecture (the fields AIConfigurator reads)."""
    cfg = {"architectures": [arch.hf_architecture], "num_hidden_layers": arch.layers, "hidden_size": arch.hidden,
           "num_attention_heads": arch.heads, "num_key_value_heads": arch.kv_heads, "head_dim": arch.head_dim,
           "intermediate_size": arch.intermediate, "vocab_size": arch.vocab,
           "max_position_embeddings": arch.max_position, "tie_word_embeddings": arch.tied_embeddings,
           "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5, "hidden_act": "silu", "rope_theta": 500000.0}
    kind = arch.hf_architecture
    if kind == "LlamaForCausalLM":
        cfg["model_type"] = "llama"
    elif kind == "MixtralForCausalLM":
        cfg.update(model_type="mixtral", num_local_experts=arch.experts, num_experts_per_tok=arch.experts_per_token)
    elif kind == "Qwen3MoeForCausalLM":
        cfg.update(model_type="qwen3_moe", num_experts=arch.experts, num_experts_per_tok=arch.experts_per_token,
                   moe_intermediate_size=arch.moe_intermediate, decoder_sparse_step=1, mlp_only_layers=[],
                   norm_topk_prob=True)
    else:
        raise ValueError(kind)
    return cfg


def aic_runner(cases_path: str, out_path: str) -> int:
    """Runs under AIConfigurator's interpreter: stdlib and aiconfigurator only."""
    import logging

    logging.disable(logging.WARNING)
    from aiconfigurator.cli.api import cli_estimate

    out = {}
    for case in json.loads(Path(cases_path).read_text(encoding="utf-8")):
        try:
            r = cli_estimate(case["model_path"], case["system"], isl=case["isl"], osl=case["osl"],
                             batch_size=case["batch"], tp_size=case["tp"], **case["quant"], **case["moe"])
            out[case["label"]] = {"tokens_per_s": float(r.raw["tokens/s"]), "version": r.backend_version}
        except Exception as e:  # noqa: BLE001 - a case AIConfigurator cannot express is reported, not fatal
            out[case["label"]] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
        Path(out_path).write_text(json.dumps(out), encoding="utf-8")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aic-python", type=Path)
    p.add_argument("--release", default="1.0")
    p.add_argument("--rows", type=Path, default=ROOT / "tests" / "data" / "perf" / "trtllm-published-throughput.json")
    p.add_argument("--aic-runner", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.aic_runner:
        return aic_runner(*args.aic_runner)
    if args.aic_python is None:
        p.error("--aic-python is required")
    sys.path.insert(0, str(ROOT))
    import statistics

    from compiler.capacity.estimate_fit import fit_groups, predict, published_case
    from compiler.capacity.estimate_unit import coefficient_table, coefficients_for
    from compiler.capacity.published_rows import MODEL_KEYS, PRECISIONS
    from compiler.catalog.gpus import load_gpu_catalog
    from compiler.catalog.models import load_model_catalog

    rows = json.loads(args.rows.read_text(encoding="utf-8"))["rows"]
    all_cases = [(r, published_case(r)) for r in rows]
    all_cases = [(r, c) for r, c in all_cases if c is not None]
    chosen = [(r, c) for r, c in all_cases if c.facts["release"] == args.release]
    held_out = {"groups": fit_groups([c for _, c in all_cases if c.facts["release"] != args.release])}
    packaged = coefficient_table()
    gpus, models = load_gpu_catalog(), load_model_catalog()
    with tempfile.TemporaryDirectory() as tmp:
        specs, skipped = [], []
        for r, c in chosen:
            system = SYSTEMS.get(str(c.facts["gpu"]))
            if system is None:
                skipped.append(f"{c.label}: no AIConfigurator system for {c.facts['gpu']}")
                continue
            arch = models[MODEL_KEYS[r["model"]]]
            mdir = Path(tmp) / arch.name
            if not mdir.exists():
                mdir.mkdir()
                (mdir / "config.json").write_text(json.dumps(hf_config(arch)), encoding="utf-8")
            specs.append({"label": c.label, "model_path": str(mdir), "system": system, "isl": c.facts["isl"],
                          "osl": c.facts["osl"], "batch": c.facts["batch"], "tp": c.facts["tp"],
                          "quant": QUANT[r["precision"]],
                          # the published MoE rows are tensor-parallel: experts split over the tp ranks
                          "moe": {"moe_tp_size": c.facts["tp"], "moe_ep_size": 1} if arch.is_moe else {}})
        cases_path, out_path = Path(tmp) / "cases.json", Path(tmp) / "aic.json"
        cases_path.write_text(json.dumps(specs), encoding="utf-8")
        subprocess.run([str(args.aic_python), __file__, "--aic-runner", str(cases_path), str(out_path)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        aic = json.loads(out_path.read_text(encoding="utf-8"))

    def stats(errs):
        a = [abs(e) for e in errs]
        return (f"{len(a):4} rows  median |err| {statistics.median(a):6.1%}  within 25% {sum(x <= .25 for x in a) / len(a):4.0%}"
                f"  within 50% {sum(x <= .5 for x in a) / len(a):4.0%}")

    kiln_fit, kiln_out, aic_err, both = [], [], [], []
    by_label = dict((c.label, c) for _, c in chosen)
    for label, res in aic.items():
        c = by_label[label]
        wfmt, _ = PRECISIONS[str(c.facts["precision"])]
        arch_name = gpus[str(c.facts["gpu"])].arch
        k_in = predict(c.work, coefficients_for(arch_name, wfmt, args.release, packaged).coefficients)
        k_out = predict(c.work, coefficients_for(arch_name, wfmt, args.release, held_out).coefficients)
        if "error" in res:
            skipped.append(f"{label}: AIConfigurator: {res['error']}")
            continue
        kiln_fit.append(k_in / c.tokens_per_s - 1)
        kiln_out.append(k_out / c.tokens_per_s - 1)
        aic_err.append(res["tokens_per_s"] / c.tokens_per_s - 1)
        both.append((label, c.tokens_per_s, k_out, res["tokens_per_s"]))
    versions = sorted({v["version"] for v in aic.values() if "version" in v})
    print(f"published TensorRT-LLM v{args.release} rows: {len(chosen)}; AIConfigurator expressed {len(aic_err)} "
          f"(its database: TensorRT-LLM {', '.join(versions)})")
    print(f"  AIConfigurator 0.12 (agg)           {stats(aic_err)}")
    print(f"  Kiln, v{args.release} left out of the fit    {stats(kiln_out)}")
    print(f"  Kiln, packaged (fitted on them)     {stats(kiln_fit)}")
    over = sum(a > 0 for a in aic_err)
    print(f"  AIConfigurator over-predicts {over} of {len(aic_err)} rows; median signed error "
          f"{statistics.median(aic_err):+.1%} (Kiln left out: {statistics.median(kiln_out):+.1%})")
    print(f"\nnot compared ({len(skipped)}):")
    for s in skipped:
        print("  " + s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
