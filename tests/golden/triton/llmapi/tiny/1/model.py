"""Kiln's LLM-API model: serves one model with TensorRT-LLM's LLM API (PyTorch backend) inside
Triton's Python backend. Written for kiln (not derived from tensorrtllm_backend); its inputs and
outputs are those of TensorRT-LLM's own LLM-API Triton model (all_models/llmapi, 1.2.x), so a
client of that model works unchanged.

`1/model.yaml` holds the LLM() arguments (checkpoint path, parallelism, limits, KV cache,
scheduler); the tokenizer is the copy in this model's directory (parameter `tokenizer_dir`). The
instance is bound to its devices (parameter `gpu_device_ids`: one comma-separated set per instance,
';' between instances; ordinals of the devices the container sees) before TensorRT-LLM is imported.

Serving: execute() hands each request to an asyncio event loop and returns at once; every answer
goes through the request's response sender (decoupled or not), so the LLM batches requests in
flight and a new request joins the running batch. Admission control is here, not in Triton's
dynamic batcher (this model has none, as TensorRT-LLM's own): up to `max_inflight_requests` hold a
slot and are generated at once; a few more (HEADROOM_DIVISOR) are submitted ahead, in the LLM's own
queue, and take the slots as they free, oldest first, so the LLM's scheduler fills a freed slot at
once; the next wait here, first come first served, at most `max_queue_size` of them. A request
that holds no slot within `queue_timeout_ms` (0: unbounded) is aborted in the LLM if it was
submitted and rejected as Triton's queue rejects (UNAVAILABLE, the same messages). Nothing waits
while there is room. A request is cancelled when
its client cancels it (gRPC; checked every `cancellation_check_period_ms`) or when a request with
the same id carries `stop: true`: its generation is aborted, it is answered with a CANCELLED error.
As upstream's model, responses are sent and cancellations polled on threads of their own (each
is IPC to Triton's process, once per token when streaming), so the event loop that submits to
the LLM and reads its results never waits on them; one sending thread keeps each request's
responses in order.

Answers as TensorRT-LLM's own model (compiler/actions/data/trtllm_llmapi.json, `upstream_model`):
a streamed response's `text_output` is the whole text so far (parameter `stream_text: delta`
sends only what each response adds); an input the client leaves out takes upstream's default
(the prompt is echoed unless `sampling_param_exclude_input_from_output` is true); the stop
request itself is answered with a CANCELLED error. The text is TensorRT-LLM's, whose streaming
detokenizer holds back an incomplete UTF-8 sequence, so a delta never splits a character.
"""

import asyncio
import collections
import json
import os
import queue
import re
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

# request input -> SamplingParams field
SAMPLING = {
    "sampling_param_best_of": "best_of", "sampling_param_temperature": "temperature",
    "sampling_param_top_k": "top_k", "sampling_param_top_p": "top_p",
    "sampling_param_frequency_penalty": "frequency_penalty", "sampling_param_presence_penalty": "presence_penalty",
    "sampling_param_max_tokens": "max_tokens", "sampling_param_seed": "seed",
    "sampling_param_exclude_input_from_output": "exclude_input_from_output",
    "sampling_param_return_perf_metrics": "return_perf_metrics",
}
# what a left-out input means: upstream's helpers.py (get_sampling_params_from_request)
SAMPLING_DEFAULTS = {"best_of": 1, "exclude_input_from_output": False, "return_perf_metrics": False}
# request flag -> output (a CompletionOutput field of the same name)
OPTIONAL_OUTPUTS = {"return_finish_reason": "finish_reason", "return_stop_reason": "stop_reason",
                    "return_cumulative_logprob": "cumulative_logprob"}
# output -> (RequestPerfMetrics group, field, numpy type)
PERF_OUTPUTS = {
    "kv_cache_reused_block": ("kv_cache_metrics", "num_reused_blocks", np.int32),
    "kv_cache_missed_block": ("kv_cache_metrics", "num_missed_blocks", np.int32),
    "kv_cache_alloc_new_blocks": ("kv_cache_metrics", "num_new_allocated_blocks", np.int32),
    "kv_cache_alloc_total_blocks": ("kv_cache_metrics", "num_total_allocated_blocks", np.int32),
    "kv_cache_hit_rate": ("kv_cache_metrics", "kv_cache_hit_rate", np.float32),
    "arrival_time_ns": ("timing_metrics", "arrival_time", np.int64),
    "first_scheduled_time_ns": ("timing_metrics", "first_scheduled_time", np.int64),
    "first_token_time_ns": ("timing_metrics", "first_token_time", np.int64),
    "last_token_time_ns": ("timing_metrics", "last_token_time", np.int64),
    "acceptance_rate": ("speculative_decoding", "acceptance_rate", np.float32),
    "total_accepted_draft_tokens": ("speculative_decoding", "total_accepted_draft_tokens", np.int32),
    "total_draft_tokens": ("speculative_decoding", "total_draft_tokens", np.int32),
}
CANCELLED_MESSAGE = "Request cancelled by client"
# the words of Triton's own queue (core: scheduler_utils.cc), so clients see one behaviour
QUEUE_FULL_MESSAGE = "Exceeds maximum queue size"
QUEUE_TIMEOUT_MESSAGE = "Request timeout expired"


class RequestError(ValueError):
    """The client's request is wrong (answered as invalid argument)."""


class Rejected(Exception):
    """Admission control turned the request away (answered as unavailable)."""


class Cancelled(Exception):
    pass


def _instance_index(name: str) -> int:
    """Triton names instances '<group>_<n>'; a single instance may have no suffix."""
    m = re.search(r"_(\d+)$", name or "")
    return int(m.group(1)) if m else 0


def _values(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


def _scalar(request, name: str):
    values = _values(request, name)
    if values is None:
        return None
    if values.size != 1:
        raise RequestError(f"{name}: expected one value, got {values.size}")
    return values[0].item()


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _nanoseconds(value) -> int:
    """A timing metric (a timedelta, or seconds) as integer nanoseconds."""
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else float(value)
    return int(round(seconds * 1e9))


def _error(message: str, code=None):
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(error=error)


# Admitted requests beyond max_batch_size that are already submitted to the LLM (tokenized, in its
# executor's queue), so that its scheduler fills a freed slot in the same iteration instead of
# after a Python round trip and tokenization (issue 22, item 5; docs/serving-admission.md). A
# quarter of the batch, at least one: enough to cover the slots freed between two looks of this
# model's loop, small enough that few requests wait outside Kiln's own queue; each of them is still
# bounded by queue_timeout_ms (aborted in the LLM if no slot passes to it in time).
HEADROOM_DIVISOR = 4


def headroom(slots: int) -> int:
    return -(-slots // HEADROOM_DIVISOR)


class Admission:
    """Slots for requests in generation (`holding`), a few admitted requests submitted ahead of a
    slot (`ahead`, in submission order: the LLM's own queue order), and a first-come queue for the
    rest (`waiting`, not submitted). A request must hold a slot within `timeout_s` of its arrival,
    or it is answered with Triton's timeout (and aborted in the LLM if it was submitted). Used on
    the event loop's thread only, so it needs no lock."""

    def __init__(self, slots: int, max_queue: int, timeout_s: float, loop):
        self.slots, self.headroom, self.max_queue, self.timeout_s, self.loop = \
            slots, headroom(slots), max_queue, timeout_s, loop
        self.holding = 0
        self.ahead: collections.deque = collections.deque()
        self.waiting: collections.deque = collections.deque()

    async def enter(self, entry) -> None:
        """Return once `entry` may be submitted to the LLM (it holds a slot or is ahead of one);
        Rejected when the queue is full. A deadline that passes answers it (entry.expire())."""
        if self.max_queue and len(self.waiting) >= self.max_queue:
            raise Rejected(QUEUE_FULL_MESSAGE)
        entry.stage = "waiting"
        self.waiting.append(entry)
        if self.timeout_s:
            entry.deadline = self.loop.call_later(self.timeout_s, self._expire, entry)
        self._fill()
        await entry.ticket

    def _fill(self) -> None:
        """Slots go to the oldest submitted requests; free places ahead go to the oldest waiting
        one (nothing waits while there is room: a request passes through both at once)."""
        while True:
            if self.holding < self.slots and self.ahead:
                entry = self.ahead.popleft()
                entry.stage = "slot"
                self.holding += 1
                self._disarm(entry)
            elif self.waiting and (self.holding < self.slots or len(self.ahead) < self.headroom):
                entry = self.waiting.popleft()
                entry.stage = "ahead"
                self.ahead.append(entry)
                if not entry.ticket.done():
                    entry.ticket.set_result(True)
            else:
                return

    @staticmethod
    def _disarm(entry) -> None:
        if entry.deadline is not None:
            entry.deadline.cancel()
            entry.deadline = None

    def _expire(self, entry) -> None:
        entry.deadline = None
        if entry.stage in ("waiting", "ahead"):
            entry.expire()  # answers it; its leave() gives its place up

    def leave(self, entry) -> None:
        stage, entry.stage = entry.stage, "gone"
        self._disarm(entry)
        if stage == "waiting":
            self.waiting.remove(entry)
        elif stage == "ahead":
            self.ahead.remove(entry)
        elif stage == "slot":
            self.holding -= 1
        else:
            return
        self._fill()


class Outbox:
    """Responses to send, in order, on a thread of its own."""

    def __init__(self):
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="kiln-llmapi-send", daemon=True)
        self.thread.start()

    def put(self, sender, response, flags: int) -> None:
        self.queue.put((sender, response, flags))

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            sender, response, flags = item
            try:
                if response is None:
                    sender.send(flags=flags)
                else:
                    sender.send(response, flags=flags)
            except Exception as e:  # a client gone away: nothing to answer, the others go on
                pb_utils.Logger.log_warn(f"kiln-llmapi: a response could not be sent: {e}")

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(timeout=30)


class Inflight:
    """One request: its response sender, its place in admission, its LLM result, its state."""

    def __init__(self, request, admission: Admission, loop, outbox: Outbox):
        self.request, self.admission, self.outbox = request, admission, outbox
        self.sender = request.get_response_sender()
        self.id = request.request_id() or ""
        self.ticket = loop.create_future()  # done once it may be submitted
        self.stage = "new"  # in admission: waiting, ahead (submitted, no slot), slot, gone
        self.deadline = None  # the timer of its queue timeout, until it holds a slot
        self.left = False
        self.result = None
        self.task = None  # the coroutine serving it
        self.cancelled = False
        self.finished = False  # the final response is sent: nothing may follow it

    def leave(self) -> None:
        if not self.left:
            self.left = True
            self.admission.leave(self)

    def send(self, response=None, final: bool = False) -> None:
        if self.finished:
            return
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        self.finished = final
        if final:  # the slot is free before the client hears of it: its next request finds room
            self.leave()
        self.outbox.put(self.sender, response, flags)

    def cancel(self) -> None:
        """Abort the generation and answer at once; the serving coroutine stops waiting."""
        self._end(_error(CANCELLED_MESSAGE, pb_utils.TritonError.CANCELLED))

    def expire(self) -> None:
        """No slot within the queue timeout: answered as Triton's queue answers, and aborted in the
        LLM if it was submitted ahead of a slot."""
        self._end(_error(QUEUE_TIMEOUT_MESSAGE, pb_utils.TritonError.UNAVAILABLE))

    def _end(self, answer) -> None:
        if self.cancelled or self.finished:
            return
        self.cancelled = True
        if self.result is not None:
            self.result.abort()
        self.send(answer, final=True)
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        sets = params["gpu_device_ids"].split(";")
        os.environ["CUDA_VISIBLE_DEVICES"] = sets[_instance_index(args.get("model_instance_name", "")) % len(sets)]

        from tensorrt_llm import LLM, SamplingParams
        import yaml  # after tensorrt_llm, which depends on it

        with open(os.path.join(args["model_repository"], params["llm_options"]), encoding="utf-8") as f:
            options = yaml.safe_load(f)
        # the repository's own tokenizer copy, wherever the repository is mounted
        options["tokenizer"] = os.path.join(args["model_repository"], params["tokenizer_dir"])
        self.SamplingParams = SamplingParams
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.loop = asyncio.new_event_loop()
        self.admission = Admission(int(params["max_inflight_requests"]), int(params["max_queue_size"]),
                                   int(params["queue_timeout_ms"]) / 1000, self.loop)
        self.check_period = int(params["cancellation_check_period_ms"]) / 1000
        self.deltas = params.get("stream_text", "cumulative") == "delta"
        self.inflight = {}  # id(entry) -> Inflight; changed on the event loop's thread only
        self.llm = LLM(**options)
        self.outbox = Outbox()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kiln-llmapi", daemon=True)
        self.thread.start()
        self.stopping = threading.Event()
        self.watcher = threading.Thread(target=self._watch_cancellations, name="kiln-llmapi-cancel", daemon=True)
        self.watcher.start()

    # --- Triton's side ---------------------------------------------------------------------------
    def execute(self, requests):
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop)
        return None

    def finalize(self):
        if getattr(self, "loop", None) is not None:
            self.stopping.set()
            self.watcher.join(timeout=30)
            for entry in self._snapshot():
                self.loop.call_soon_threadsafe(entry.cancel)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self.outbox.close()
        if getattr(self, "llm", None) is not None:
            self.llm.shutdown()

    # --- one request, on the event loop --------------------------------------------------------
    def _parse(self, request):
        prompts = _values(request, "text_input")
        if prompts is None or prompts.size != 1:
            raise RequestError("text_input: expected one prompt per request")
        sampling = dict(SAMPLING_DEFAULTS)
        for name, field in SAMPLING.items():
            value = _scalar(request, name)
            if value is not None:
                sampling[field] = value
        stop = _values(request, "sampling_param_stop")
        if stop is not None:
            words = [_text(s) for s in stop if _text(s)]
            if words:
                sampling["stop"] = words
        streaming = bool(_scalar(request, "streaming") or False)
        if streaming and not self.decoupled:
            raise RequestError("streaming needs a decoupled model (serving.streaming: true)")
        wanted = [field for flag, field in OPTIONAL_OUTPUTS.items() if _scalar(request, flag)]
        try:
            params = self.SamplingParams(**sampling)
        except (TypeError, ValueError) as e:  # SamplingParams' own checks: the client's values
            raise RequestError(f"sampling parameters: {e}") from None
        return _text(prompts[0]), params, streaming, wanted

    def _response(self, output, wanted, streaming: bool):
        outs = output.outputs
        text = [(o.text_diff if streaming and self.deltas else o.text).encode("utf-8") for o in outs]
        tensors = [pb_utils.Tensor("text_output", np.array(text, dtype=np.object_))]
        for field in wanted:
            values = [getattr(o, field) for o in outs]
            if field == "cumulative_logprob":
                array = np.array([np.nan if v is None else v for v in values], dtype=np.float32)
            else:
                array = np.array([str(v).encode("utf-8") for v in values], dtype=np.object_)
            tensors.append(pb_utils.Tensor(field, array))
        metrics = getattr(outs[0], "request_perf_metrics", None)
        if metrics is not None:
            for name, (group, field, kind) in PERF_OUTPUTS.items():
                value = getattr(getattr(metrics, group), field)
                if name.endswith("_ns"):
                    value = _nanoseconds(value)
                tensors.append(pb_utils.Tensor(name, np.array([value], dtype=kind)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    async def _serve(self, request):
        try:
            stop = bool(_scalar(request, "stop"))
        except RequestError as e:
            self.outbox.put(request.get_response_sender(), _error(str(e), pb_utils.TritonError.INVALID_ARG),
                            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        if stop:  # it ends requests, it starts none: no slot, no queue
            return self._stop(request)
        entry = Inflight(request, self.admission, self.loop, self.outbox)
        entry.task = asyncio.current_task()
        key = id(entry)
        self.inflight[key] = entry
        try:
            prompt, params, streaming, wanted = self._parse(request)
            await self.admission.enter(entry)
            if request.is_cancelled():
                raise Cancelled()
            entry.result = self.llm.generate_async(prompt, sampling_params=params, streaming=streaming)
            last = None
            async for output in entry.result:
                if entry.cancelled:
                    raise Cancelled()
                last = output
                if streaming:
                    entry.send(self._response(output, wanted, streaming=True), final=output.finished)
            if entry.cancelled:
                raise Cancelled()
            if not streaming:
                entry.send(self._response(last, wanted, streaming=False), final=True)
            entry.send(final=True)  # a no-op unless a stream ended without a finished response
        except Cancelled:
            entry.cancel()
        except asyncio.CancelledError:  # cancel() from elsewhere: the CANCELLED answer is sent
            pass
        except Rejected as e:
            entry.send(_error(str(e), pb_utils.TritonError.UNAVAILABLE), final=True)
        except RequestError as e:
            entry.send(_error(str(e), pb_utils.TritonError.INVALID_ARG), final=True)
        except Exception as e:
            entry.send(_error(f"generation failed: {e}"), final=True)
        finally:
            del self.inflight[key]
            entry.leave()

    def _stop(self, request):
        """`stop: true`: cancel the requests with this request's id, then answer it."""
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        target = request.request_id() or ""
        if not target:
            self.outbox.put(sender, _error("stop: the request must carry the id of the request to cancel",
                                           pb_utils.TritonError.INVALID_ARG), final)
            return
        for entry in list(self.inflight.values()):
            if entry.id == target:
                entry.cancel()
        # upstream's handle_stop_request answers the stop request itself as cancelled
        self.outbox.put(sender, _error(CANCELLED_MESSAGE, pb_utils.TritonError.CANCELLED), final)

    # --- the cancellation thread ----------------------------------------------------------------
    def _snapshot(self) -> list:
        """The requests in flight, read from another thread than the loop's that changes them."""
        for _ in range(3):
            try:
                return list(self.inflight.values())
            except RuntimeError:  # changed while copied: copy again
                continue
        return []

    def _watch_cancellations(self):
        """Clients that cancel (gRPC cancellation, a closed stream) are seen here; the loop's
        thread cancels them (entry.cancel checks again that nothing was sent meanwhile)."""
        while not self.stopping.wait(self.check_period):
            for entry in self._snapshot():
                if not entry.cancelled and not entry.finished and entry.request.is_cancelled():
                    self.loop.call_soon_threadsafe(entry.cancel)
