"""Tokenizer and model training for the quickstart model, deterministic on CPU.

Same corpus, same seeds, same torch build and thread count -> the same bytes: every random draw
comes from explicitly seeded generators, deterministic algorithms are enforced, and the training
runs with a fixed number of threads (float sums are not associative, so a different thread count
may round differently). Across CPU instruction sets (AVX2 vs AVX-512 kernels) the last bits of the
weights may differ; the tokenizer does not depend on any of this.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

EOS = "<|endoftext|>"


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1234
    seq_len: int = 128
    batch_size: int = 16
    steps: int = 400
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.1
    threads: int = 2


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: Path) -> None:
    """Byte-level BPE (GPT-2 style, no unknown tokens), with one special token that ends a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"the corpus gives {tok.get_vocab_size()} tokens, not {vocab_size}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS, "eos_token": EOS,
           "unk_token": EOS, "pad_token": EOS, "model_max_length": 1024, "clean_up_tokenization_spaces": False}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def token_stream(tokenizer_file: Path, texts: list[str]) -> list[int]:
    """All texts, each followed by the end-of-text token, as one stream of token ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for enc in tok.encode_batch(texts):
        ids += enc.ids + [eos]
    return ids


def train_model(config_file: Path, stream: list[int], cfg: TrainConfig, out_file: Path,
                log=print) -> dict:
    """Train LlamaForCausalLM from scratch on windows of the token stream; save bf16 safetensors."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    config = LlamaConfig(**json.loads(config_file.read_text(encoding="utf-8")))
    model = LlamaForCausalLM(config).float()
    model.train()
    data = torch.tensor(stream, dtype=torch.long)
    n_windows = (len(data) - 1) // cfg.seq_len
    gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))

    def lr_at(step: int) -> float:
        if step < cfg.warmup:
            return cfg.lr * (step + 1) / cfg.warmup
        progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    start = time.monotonic()
    losses = []
    for step in range(cfg.steps):
        # random window starts (not only multiples of seq_len) so the model sees every offset
        starts = torch.randint(0, len(data) - cfg.seq_len - 1, (cfg.batch_size,), generator=gen)
        batch = torch.stack([data[s:s + cfg.seq_len + 1] for s in starts.tolist()])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        out = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone())
        # labels are shifted inside the model; feeding input_ids as labels predicts the next token
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(out.loss.item())
        if step % 50 == 0 or step == cfg.steps - 1:
            log(f"step {step:4d}  loss {out.loss.item():.3f}  lr {lr_at(step):.2e}  "
                f"{time.monotonic() - start:.0f}s")
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sorted(model.state_dict().items())}
    save_file(state, str(out_file), metadata={"format": "pt"})
    return {"windows": n_windows, "tokens": len(stream), "final_loss": losses[-1],
            "seconds": round(time.monotonic() - start, 1)}


def perplexity(model, tokenizer_file: Path, texts: list[str], max_len: int = 512) -> float:
    """Token-weighted perplexity of `model` over texts, each truncated to max_len tokens."""
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    nll, count = 0.0, 0
    with torch.inference_mode():
        for enc in tok.encode_batch(texts):
            ids = torch.tensor([enc.ids[:max_len]])
            if ids.shape[1] < 2:
                continue
            logits = model(ids).logits[0, :-1].float()
            nll += torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
            count += ids.shape[1] - 1
    return math.exp(nll / count)
