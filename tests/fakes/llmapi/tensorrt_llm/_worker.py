"""The stand-in's executor: a process of its own (as TensorRT-LLM's executor workers are), so that
generating never competes with the Triton model's threads for one interpreter. It speaks JSON lines:
commands on stdin ({"op": "submit", "rid", "ids", "params"} / {"op": "abort", "rid"}), one update per
line on stdout ({"rid", "text", "token_ids", "finish_reason", "stop_reason", "logprob", "metrics",
"done"}); events go to stderr, i.e. the server log, as `kiln-standin: ...`.

Scheduling is in-flight batching: each iteration admits queued requests, first come first served,
up to max_batch_size and advances every active request by one token with the real torch model (KV cache per request), so a
request joins a running batch at the next iteration. An iteration lasts at least `step_ms` (a GPU
step's length; the tiny model alone is faster). An aborted request that is still queued leaves the
queue at once and gets its final (cancelled) update, as the executor's cancelRequest does; an active
one is ended at its next step.

Outputs as the real executor's (tensorrt_llm/executor/result.py, llmapi/tokenizer.py, 1.2.x): with
`exclude_input_from_output` false the prompt's tokens lead the output's, so its text starts with
the prompt; while streaming, text that ends in an incomplete UTF-8 sequence (U+FFFD) is held back
until the tokens that complete it (TransformersTokenizer.decode_incrementally).
"""

from __future__ import annotations

import collections
import json
import math
import os
import sys
import threading
import time
from typing import Optional


def log(message: str) -> None:
    print(f"kiln-standin: {message}", file=sys.stderr, flush=True)


class Sequence:
    def __init__(self, rid: int, ids: list, params: dict, torch):
        self.rid, self.prompt_ids, self.params = rid, ids, params
        self.generated: list[int] = []
        self.past = None
        self.next_input = ids
        self.logprob = 0.0
        self.arrival, self.first_scheduled, self.first_token = time.monotonic(), None, None
        seed = params["seed"] if params["seed"] is not None else 0  # the C++ runtime's default seed
        self.generator = torch.Generator().manual_seed(seed)


class Executor:
    def __init__(self, config: dict):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(config["model"], dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(config["tokenizer"])
        self.max_batch_size, self.max_seq_len = config["max_batch_size"], config["max_seq_len"]
        self.tokens_per_block, self.step_s = config["tokens_per_block"], config["step_ms"] / 1000
        self.waiting: collections.deque = collections.deque()  # submitted, not yet scheduled
        self.arrived = threading.Condition()
        self.active: list[Sequence] = []
        self.aborted: set[int] = set()
        self.lock = threading.Lock()
        self.out_lock = threading.Lock()

    def emit(self, update: dict) -> None:
        with self.out_lock:
            sys.stdout.write(json.dumps(update) + "\n")
            sys.stdout.flush()

    def commands(self) -> None:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "submit":
                with self.arrived:
                    self.waiting.append(Sequence(cmd["rid"], cmd["ids"], cmd["params"], self.torch))
                    log(f"request {cmd['rid']} submitted; queued: {len(self.waiting)}")
                    self.arrived.notify()
            elif cmd["op"] == "abort":
                with self.arrived:
                    queued = next((seq for seq in self.waiting if seq.rid == cmd["rid"]), None)
                    if queued is not None:
                        self.waiting.remove(queued)
                        log(f"request {queued.rid} aborted while queued; queued: {len(self.waiting)}")
                        self.finish(queued, "cancelled", None)
                        continue
                with self.lock:
                    self.aborted.add(cmd["rid"])
        os._exit(0)  # stdin closed: the LLM shut down

    def run(self) -> None:
        threading.Thread(target=self.commands, daemon=True).start()
        self.emit({"ready": True})
        while True:
            started = time.monotonic()
            while len(self.active) < self.max_batch_size:
                with self.arrived:
                    if not self.waiting and not self.active:
                        self.arrived.wait(0.05)
                        # idle until now: the iteration starts with the request it admits, or a
                        # request scheduled during the wait would get a step shorter than step_ms
                        started = time.monotonic()
                    if not self.waiting:
                        break
                    seq = self.waiting.popleft()
                seq.first_scheduled = time.monotonic()
                self.active.append(seq)
                log(f"request {seq.rid} admitted; in flight: {len(self.active)}")
            if not self.active:
                continue
            with self.torch.no_grad():
                for seq in list(self.active):
                    self.step(seq)
            left = self.step_s - (time.monotonic() - started)
            if left > 0:
                time.sleep(left)

    def step(self, seq: Sequence) -> None:
        with self.lock:
            abort = seq.rid in self.aborted
            self.aborted.discard(seq.rid)
        if abort:
            log(f"request {seq.rid} aborted after {len(seq.generated)} of {seq.params['max_tokens']} tokens")
            return self.finish(seq, "cancelled", None)
        torch, p = self.torch, seq.params
        out = self.model(torch.tensor([seq.next_input]), past_key_values=seq.past, use_cache=True)
        seq.past = out.past_key_values
        logits = out.logits[0, -1].float()
        token = self.sample(logits, seq)
        seq.logprob += torch.log_softmax(logits, -1)[token].item()
        seq.generated.append(token)
        seq.next_input = [token]
        if seq.first_token is None:
            seq.first_token = time.monotonic()
        end_id = p["end_id"] if p["end_id"] is not None else self.tokenizer.eos_token_id
        text = self.text(seq.generated, p)
        stop = p["stop"]
        for word in ([stop] if isinstance(stop, str) else (stop or [])):
            if word in text:
                return self.finish(seq, "stop", word, text if p["include_stop_str_in_output"] else
                                   text[:text.index(word)])
        if token == end_id and not p["ignore_eos"]:
            seq.generated.pop()
            return self.finish(seq, "stop", None)
        if len(seq.generated) >= p["max_tokens"] or len(seq.prompt_ids) + len(seq.generated) >= self.max_seq_len:
            return self.finish(seq, "length", None)
        if p["streaming"]:
            text = self.shown(seq, text)
            if text.endswith("\ufffd"):
                return  # held back: the next token completes the character
            self.emit({"rid": seq.rid, "text": text, "token_ids": self.ids(seq), "finish_reason": None,
                       "stop_reason": None, "logprob": seq.logprob, "metrics": None, "done": False})

    def sample(self, logits, seq: Sequence) -> int:
        p, torch = seq.params, self.torch
        if p["greedy"]:
            return int(logits.argmax())
        logits = logits / (p["temperature"] if p["temperature"] else 1.0)
        if p["top_k"]:
            kth = torch.topk(logits, p["top_k"]).values[-1]
            logits = torch.where(logits < kth, torch.full_like(logits, -math.inf), logits)
        probs = torch.softmax(logits, -1)
        if p["top_p"] is not None and p["top_p"] < 1:
            ordered, index = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, -1) - ordered < p["top_p"]
            probs = torch.zeros_like(probs).scatter(0, index[keep], ordered[keep])
        return int(torch.multinomial(probs / probs.sum(), 1, generator=seq.generator))

    def ids(self, seq: Sequence) -> list:
        return seq.generated if seq.params["exclude_input_from_output"] else seq.prompt_ids + seq.generated

    def shown(self, seq: Sequence, generated_text: str) -> str:
        """The output's text: the generated text, after the prompt's unless the input is excluded."""
        if seq.params["exclude_input_from_output"]:
            return generated_text
        return self.text(seq.prompt_ids, seq.params) + generated_text

    def text(self, ids: list, p: dict) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=p["skip_special_tokens"])

    def finish(self, seq: Sequence, reason: str, stop_reason, text: Optional[str] = None) -> None:
        if seq in self.active:
            self.active.remove(seq)
        if text is None:
            text = self.text(seq.generated, seq.params)
        metrics = None
        if seq.params["return_perf_metrics"]:
            blocks = math.ceil((len(seq.prompt_ids) + len(seq.generated)) / self.tokens_per_block)
            metrics = {
                "kv_cache_metrics": {"num_total_allocated_blocks": blocks, "num_new_allocated_blocks": blocks,
                                     "num_reused_blocks": 0, "num_missed_blocks": blocks, "kv_cache_hit_rate": 0.0},
                "timing_metrics": {"arrival_time": seq.arrival, "first_scheduled_time": seq.first_scheduled or seq.arrival,
                                   "first_token_time": seq.first_token or time.monotonic(),
                                   "last_token_time": time.monotonic()},
                "speculative_decoding": {"acceptance_rate": 0.0, "total_accepted_draft_tokens": 0,
                                         "total_draft_tokens": 0}}
        log(f"request {seq.rid} finished ({reason}) after {len(seq.generated)} tokens; in flight: {len(self.active)}")
        self.emit({"rid": seq.rid, "text": self.shown(seq, text), "token_ids": self.ids(seq), "finish_reason": reason,
                   "stop_reason": stop_reason, "logprob": seq.logprob, "metrics": metrics, "done": True})


if __name__ == "__main__":
    Executor(json.loads(sys.argv[1])).run()
