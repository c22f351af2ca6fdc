#!/usr/bin/env python3
"""Build the quickstart model (examples/quickstart/model/) and its data files (data/*.jsonl) from
this repository's own text, deterministically, on CPU in a few minutes.

    python3 scripts/make_quickstart_model.py            # rewrite the committed files
    python3 scripts/make_quickstart_model.py --check    # rebuild elsewhere, compare byte for byte

The text is read from a pinned commit (CORPUS_COMMIT), not from the working tree, so the model
does not change when the repository does. Needs torch, transformers, tokenizers and safetensors
(`bash scripts/install.sh --dev`). The produced files are committed; the build and the tests read
them and never run this script.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from quickstart_model.corpus import Source, collect, split  # noqa: E402
from quickstart_model.train import (  # noqa: E402
    EOS, TrainConfig, perplexity, token_stream, train_model, train_tokenizer)

CORPUS_COMMIT = "0a4380bd53ab7a45eee0537dfac34443c22a3223"
SPLIT_SEED = 20240611
N_EVAL = {"prose": 40, "code": 40}
N_CALIBRATION = {"prose": 64, "code": 64}

# The architecture the quickstart spec is checked against (examples/quickstart/model/config.json).
# intermediate_size is a multiple of 128 so that INT4 AWQ's default 128-wide groups tile every
# projection (ModelOpt cannot pack partial groups).
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 640,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "vocab_size": 4096,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
}

OUTPUTS = ["model/config.json", "model/tokenizer.json", "model/tokenizer_config.json", "model/model.safetensors",
           "data/calib-prose.jsonl", "data/calib-code.jsonl", "data/eval-prose.jsonl", "data/eval-code.jsonl"]


def write_jsonl(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False, sort_keys=True) + "\n" for t in texts),
                    encoding="utf-8")


def build(out: Path, commit: str | None, cfg: TrainConfig, log=print) -> dict:
    (out / "model").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    samples = collect(Source(ROOT, commit))
    parts = {}
    for domain in ("prose", "code"):
        texts = getattr(samples, domain)
        parts[domain] = split(texts, seed=SPLIT_SEED, n_eval=N_EVAL[domain], n_calibration=N_CALIBRATION[domain])
        write_jsonl(out / "data" / f"calib-{domain}.jsonl", parts[domain].calibration)
        write_jsonl(out / "data" / f"eval-{domain}.jsonl", parts[domain].eval)
        assert not set(parts[domain].calibration) & set(parts[domain].eval)
        log(f"{domain}: {len(texts)} samples, {len(parts[domain].train)} train, "
            f"{len(parts[domain].calibration)} calibration, {len(parts[domain].eval)} eval")
    train_texts = parts["prose"].train + parts["code"].train

    config_file = out / "model" / "config.json"
    config_file.write_text(json.dumps(CONFIG, indent=2) + "\n", encoding="utf-8")
    train_tokenizer(train_texts, CONFIG["vocab_size"], out / "model")
    stream = token_stream(out / "model" / "tokenizer.json", train_texts)
    log(f"tokenizer: {CONFIG['vocab_size']} tokens; training stream {len(stream)} tokens")
    assert stream.count(0) == len(train_texts), f"{EOS} must be token 0"
    stats = train_model(config_file, stream, cfg, out / "model" / "model.safetensors", log=log)
    return {"stats": stats, "eval": {d: parts[d].eval for d in parts}}


def evaluate(out: Path, eval_sets: dict[str, list[str]], seed: int) -> dict[str, tuple[float, float]]:
    """Eval perplexity per domain: untrained (same init seed) vs trained."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    untrained = LlamaForCausalLM(LlamaConfig(**CONFIG)).to(torch.bfloat16).float().eval()
    trained = LlamaForCausalLM.from_pretrained(str(out / "model"), dtype=torch.float32).eval()
    tok = out / "model" / "tokenizer.json"
    return {d: (perplexity(untrained, tok, texts), perplexity(trained, tok, texts)) for d, texts in eval_sets.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "examples" / "quickstart",
                    help="directory that receives model/ and data/ (default: examples/quickstart)")
    ap.add_argument("--commit", default=CORPUS_COMMIT, help="git commit to read the text from")
    ap.add_argument("--worktree", action="store_true", help="read the working tree instead of a commit")
    ap.add_argument("--steps", type=int, default=TrainConfig.steps)
    ap.add_argument("--threads", type=int, default=TrainConfig.threads)
    ap.add_argument("--check", action="store_true",
                    help="build into a temporary directory and compare with --out byte for byte")
    args = ap.parse_args(argv)
    cfg = TrainConfig(steps=args.steps, threads=args.threads)
    commit = None if args.worktree else args.commit
    start = time.monotonic()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            build(Path(tmp), commit, cfg)
            differ = [rel for rel in OUTPUTS if not filecmp.cmp(Path(tmp) / rel, args.out / rel, shallow=False)]
        for rel in differ:
            print(f"differs: {rel}")
        print("identical" if not differ else f"{len(differ)} files differ", f"({time.monotonic() - start:.0f}s)")
        return 1 if differ else 0
    result = build(args.out, commit, cfg)
    print(f"trained in {result['stats']['seconds']}s, final training loss {result['stats']['final_loss']:.3f}")
    for domain, (before, after) in evaluate(args.out, result["eval"], cfg.seed).items():
        print(f"eval perplexity ({domain}): untrained {before:.1f} -> trained {after:.2f}")
    print(f"total {time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
