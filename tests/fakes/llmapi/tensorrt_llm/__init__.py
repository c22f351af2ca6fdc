"""A stand-in for TensorRT-LLM's LLM API, for serving tests on a machine without a GPU build of
TensorRT-LLM. It keeps the pinned API and refuses what the real one refuses, and it generates for
real, token by token, with the torch model it is pointed at (the quickstart's checkpoint).

The API is data: compiler/actions/data/trtllm_llmapi.json (path in $KILN_LLMAPI_FACTS), with the
TensorRT-LLM 1.2.x sources it was read from:
- LLM(**kwargs): the explicit constructor arguments plus TorchLlmArgs fields only ("LLM got invalid
  argument: <key>"), typed, and strict nested configs (KvCacheConfig, SchedulerConfig, ...);
- generate_async(...): the pinned parameter list; its result is iterated asynchronously only when it
  was made inside a running event loop (the real GenerationResult asserts the same);
- SamplingParams: a keyword-only dataclass of the pinned fields, validated as the real one is;
- results: RequestOutput/CompletionOutput with the pinned attributes, abort(), perf metrics.

Generation runs in a process of its own (_worker.py), as TensorRT-LLM's executor does: in-flight
batching up to max_batch_size, one token per active request per iteration, each iteration at least
$KILN_STANDIN_STEP_MS milliseconds long. Events go to stderr (the server log) as `kiln-standin: ...`
lines: admissions, finishes, aborts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Optional

FACTS = json.loads(Path(os.environ["KILN_LLMAPI_FACTS"]).read_text(encoding="utf-8"))


def _log(message: str) -> None:
    print(f"kiln-standin: {message}", file=sys.stderr, flush=True)


# --- SamplingParams ----------------------------------------------------------------------------
def _sampling_post_init(self) -> None:
    # SamplingParams.__post_init__ and _validate (tensorrt_llm/sampling_params.py, 1.2.0rc2)
    if self.pad_id is None:
        self.pad_id = self.end_id
    self.best_of = self.best_of or self.n
    if self.top_p is not None and (self.top_p < 0 or self.top_p > 1):
        raise ValueError(f"require 0 <= top_p <= 1, got top_p={self.top_p}")
    if self.top_k is not None and self.top_k < 0:
        raise ValueError(f"require top_k >= 0, got top_k={self.top_k}")
    if self.temperature is not None and self.temperature < 0:
        raise ValueError(f"require temperature >= 0, got temperature={self.temperature}")
    if self.best_of is not None and self.best_of < self.n:
        raise ValueError(f"best_of ({self.best_of}) cannot be less than n ({self.n})")
    if self.best_of is not None and self.best_of > 1 and self.greedy:
        raise ValueError(f"Greedy decoding in the LLM API does not allow multiple returns. Please set to "
                         f"best_of=1, got best_of={self.best_of}.")


def _greedy(self) -> bool:
    t, p, k = self.temperature, self.top_p, self.top_k
    return not self.use_beam_search and ((t is None and p is None and k is None) or k == 1 or p == 0.0 or t == 0)


SamplingParams = dataclasses.make_dataclass(
    "SamplingParams", [(name, Any, dataclasses.field(default=default)) for name, default in
                       FACTS["sampling_params"].items()],
    namespace={"__post_init__": _sampling_post_init, "greedy": property(_greedy)},
    kw_only=True, slots=True)


# --- results -----------------------------------------------------------------------------------
@dataclasses.dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list = dataclasses.field(default_factory=list)
    cumulative_logprob: Optional[float] = None
    logprobs: list = dataclasses.field(default_factory=list)
    prompt_logprobs: list = dataclasses.field(default_factory=list)
    finish_reason: Optional[str] = None
    stop_reason: Any = None
    generation_logits: Any = None
    disaggregated_params: Any = None
    request_perf_metrics: Any = None
    _last_text_len: int = 0

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len:]

    @property
    def length(self) -> int:
        return len(self.token_ids)


class _Group:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class RequestOutput:
    """What generate_async returns: iterated asynchronously, one step per response."""

    def __init__(self, request_id: int, prompt: str, prompt_token_ids: list, executor: "_Executor", streaming: bool):
        self.request_id, self.prompt, self.prompt_token_ids = request_id, prompt, prompt_token_ids
        self.outputs = [CompletionOutput(0)]
        self._done = False
        self._aborted = False
        self._executor = executor
        self._streaming = streaming
        try:  # has_event_loop(): an AsyncQueue only inside a running loop, as the real result
            self._loop = asyncio.get_running_loop()
            self._queue = asyncio.Queue()
        except RuntimeError:
            self._loop = None
            self._queue = queue.Queue()

    @property
    def finished(self) -> bool:
        return self._done

    def abort(self) -> None:
        self._executor.abort(self.request_id)
        self._aborted = True

    def aborted(self) -> bool:
        return self._aborted

    def _deliver(self, update) -> None:  # from the worker thread
        if self._loop is None:
            self._queue.put(update)
        else:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, update)

    def _apply(self, update) -> None:
        out = self.outputs[0]
        out._last_text_len = len(out.text)
        out.text, out.token_ids, out.finish_reason, out.stop_reason, out.cumulative_logprob, \
            out.request_perf_metrics, self._done = update

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._done:
            raise StopAsyncIteration
        assert self._loop is not None, ("The asyncio event loop was not present during initialization, so "
                                        "async operations are not available.")
        self._apply(await self._queue.get())
        return self

    async def aresult(self):
        while not self._done:
            await self.__anext__()
        return self

    def result(self, timeout: Optional[float] = None):
        while not self._done:
            self._apply(self._queue.get(timeout=timeout))
        return self


# --- the executor: a process of its own (_worker.py), as TensorRT-LLM's are ---------------------
class _Executor:
    """The client side: submits to and aborts in the worker, hands its updates to the results."""

    def __init__(self, config: dict):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_worker.py")), json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.results: dict[int, RequestOutput] = {}
        self.lock = threading.Lock()
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError(f"the stand-in executor did not start (exit {self.proc.wait()})")
        self.reader = threading.Thread(target=self._read, name="standin-results", daemon=True)
        self.reader.start()

    def _send(self, command: dict) -> None:
        with self.lock:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()

    def submit(self, result: "RequestOutput", params: "SamplingParams") -> None:
        self.results[result.request_id] = result
        wanted = ("max_tokens", "end_id", "stop", "include_stop_str_in_output", "ignore_eos", "temperature",
                  "top_k", "top_p", "seed", "skip_special_tokens", "return_perf_metrics", "exclude_input_from_output")
        p = {k: getattr(params, k) for k in wanted}
        p.update(greedy=params.greedy, streaming=result._streaming)
        self._send({"op": "submit", "rid": result.request_id, "ids": result.prompt_token_ids, "params": p})

    def abort(self, rid: int) -> None:
        self._send({"op": "abort", "rid": rid})

    def _read(self) -> None:
        for line in self.proc.stdout:
            u = json.loads(line)
            result = self.results.get(u["rid"])
            if result is None:
                continue
            if u["done"]:
                del self.results[u["rid"]]
            metrics = None
            if u["metrics"]:
                m = u["metrics"]
                timing = {k: datetime.timedelta(seconds=v) for k, v in m["timing_metrics"].items()}
                metrics = _Group(kv_cache_metrics=_Group(**m["kv_cache_metrics"]), timing_metrics=_Group(**timing),
                                 speculative_decoding=_Group(**m["speculative_decoding"]))
            result._deliver((u["text"], u["token_ids"], u["finish_reason"], u["stop_reason"], u["logprob"], metrics,
                             u["done"]))

    def shutdown(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- LLM ---------------------------------------------------------------------------------------
def _check_value(path: str, spec: dict, value) -> None:
    kinds = {"int": int, "bool": bool, "str": str, "float": (float, int), "dict": dict, "list": list}
    if value is None and spec.get("nullable"):
        return
    kind = kinds[spec["type"]]
    if not isinstance(value, kind) or (spec["type"] in ("int", "float") and isinstance(value, bool)):
        raise ValueError(f"{path}: expected {spec['type']}, got {value!r}")
    if "values" in spec and value not in spec["values"]:
        raise ValueError(f"{path}: {value!r} is not one of {spec['values']}")
    if "fields" in spec:
        extra = set(value) - set(spec["fields"])
        if extra:  # StrictBaseModel: extra = "forbid"
            raise ValueError(f"{path}: Extra inputs are not permitted: {sorted(extra)}")
        for key, sub in value.items():
            _check_value(f"{path}.{key}", spec["fields"][key], sub)


def check_llm_args(args: dict, cls: str = "LLM") -> None:
    """What BaseLLM.__init__ and the LlmArgs models refuse: a keyword that is not a field, a value of
    the wrong type or outside its choices, an unknown key of a strict nested config."""
    valid = set(FACTS["llm_args"]) | set(FACTS["llm_explicit_arguments"]) | {"_mpi_session"}
    for key in args:
        if key not in valid:
            raise ValueError(f"{cls} got invalid argument: {key}")
    for key, value in args.items():
        if key in FACTS["llm_args"]:
            _check_value(key, FACTS["llm_args"][key], value)


class LLM:
    def __init__(self, model, tokenizer=None, tokenizer_mode="auto", skip_tokenizer_init=False,
                 trust_remote_code=False, tensor_parallel_size=1, dtype="auto", revision=None,
                 tokenizer_revision=None, **kwargs):
        args = {"model": str(model), "tensor_parallel_size": tensor_parallel_size, **kwargs}
        if tokenizer is not None:
            args["tokenizer"] = str(tokenizer)
        check_llm_args(args, self.__class__.__name__)
        if tensor_parallel_size * kwargs.get("pipeline_parallel_size", 1) != 1:
            raise RuntimeError("the stand-in serves one device (tensor_parallel_size * pipeline_parallel_size == 1)")
        from transformers import AutoTokenizer

        kv = kwargs.get("kv_cache_config") or {}
        self.args = args
        self._ids = iter(range(1, 1 << 62))
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer or model))
        max_batch_size = kwargs.get("max_batch_size") or 2048  # BuildConfig's default
        self._executor = _Executor({"model": str(model), "tokenizer": str(tokenizer or model),
                                    "max_batch_size": max_batch_size, "max_seq_len": kwargs.get("max_seq_len") or 1 << 30,
                                    "tokens_per_block": kv.get("tokens_per_block", 32),
                                    "step_ms": float(os.environ.get("KILN_STANDIN_STEP_MS", "0"))})
        _log(f"LLM ready: max_batch_size {max_batch_size}")

    def generate_async(self, inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None,
                       streaming=False, kv_cache_retention_config=None, disaggregated_params=None,
                       _postproc_params=None, scheduling_params=None, cache_salt=None) -> RequestOutput:
        params = sampling_params if sampling_params is not None else SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        if not isinstance(inputs, str):
            raise TypeError(f"The inputs must be type str or list of int, but got {type(inputs)}")
        ids = self.tokenizer.encode(inputs, add_special_tokens=params.add_special_tokens)
        result = RequestOutput(next(self._ids), inputs, ids, self._executor, bool(streaming))
        self._executor.submit(result, params)
        return result

    def shutdown(self) -> None:
        self._executor.shutdown()
