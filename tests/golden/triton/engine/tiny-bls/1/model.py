"""Kiln's BLS model: the ensemble's pipeline (preprocessing -> tensorrt_llm -> postprocessing) driven
from Python, for clients that want one model with streaming and per-request error messages.
Written for kiln (not derived from tensorrtllm_backend). The three model names come from the
parameters, so one repository can hold the pipelines of several models.

Requests run concurrently in threads: each waits on the engine, and the engine batches them in
flight. execute() only hands them over and returns, decoupled or not: every answer goes through
the request's response sender, so a request arriving while others generate is dispatched at once
(a blocking execute() held Triton's instance until its whole batch had finished). When the model
is decoupled, `stream` asks for one response per step.

Admission control is here, as in the llmapi model: the TensorRT-LLM backend hands every request
to its executor at once, so the engine model's queue timeout never holds one back (Triton's queue
policy covers only requests that wait for execute()). Up to `max_inflight_requests` requests are
in the pipeline at once; the next wait, first come first served, at most `max_queue_size` of them
and each at most `queue_timeout_ms` (0: unbounded), and are rejected as Triton's queue rejects
(UNAVAILABLE, the same messages). Nothing waits while there is room.

Text is detokenized incrementally (the technique of vLLM's and TGI's streaming detokenizers): a
token is not always a whole character (byte-level BPE spreads "🙂" over several tokens, a
byte-fallback token is one byte), so each step decodes a window of the request's tokens after a
context of the ones already answered, and a text ending in an incomplete character (U+FFFD) is
held back until the tokens that complete it arrive. Streamed pieces concatenate to the text of
the whole sequence.
"""

import collections
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils

# request input -> (model it goes to, that model's input name)
PRE_INPUTS = {"text_input": "text", "max_tokens": "max_tokens", "stop_words": "stop_words",
              "bad_words": "bad_words", "end_id": "end_id", "pad_id": "pad_id"}
ENGINE_INPUTS = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "temperature": "temperature",
                 "repetition_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty", "seed": "seed", "beam_width": "beam_width",
                 "stream": "streaming"}
# preprocessing output -> engine input
PRE_TO_ENGINE = {"input_ids": "input_ids", "input_lengths": "input_lengths",
                 "request_output_len": "request_output_len", "stop_words_list": "stop_words_list",
                 "bad_words_list": "bad_words_list", "out_end_id": "end_id", "out_pad_id": "pad_id"}


QUEUE_FULL_MESSAGE = "Exceeds maximum queue size"  # Triton's own words for its queue policy's rejections
QUEUE_TIMEOUT_MESSAGE = "Request timeout expired"


class StepFailed(Exception):
    pass


class Admission:
    """Slots for requests in the pipeline and a first-come queue for the rest. `start(request)`
    runs a request that holds a slot (and calls done() when it leaves); `reject(request, why)`
    answers one turned away. Both are called outside the lock."""

    def __init__(self, slots: int, max_queue: int, timeout_s: float, start, reject):
        self.free, self.max_queue, self.timeout_s = slots, max_queue, timeout_s
        self.start, self.reject = start, reject
        self.waiting: collections.deque = collections.deque()  # (deadline, request), deadlines ascending
        self.cond = threading.Condition()
        self.closed = ""  # once unloading: why nothing starts any more
        if timeout_s:
            threading.Thread(target=self._expire, name="kiln-bls-queue-timeout", daemon=True).start()

    def submit(self, request) -> None:
        with self.cond:
            if self.closed:
                why = self.closed
            elif self.free > 0 and not self.waiting:
                self.free -= 1
                why = None
            elif self.max_queue and len(self.waiting) >= self.max_queue:
                why = QUEUE_FULL_MESSAGE
            else:
                self.waiting.append((time.monotonic() + self.timeout_s, request))
                self.cond.notify()
                return
        if why:
            self.reject(request, why)
        else:
            self.start(request)

    def done(self) -> None:
        """A request left the pipeline: its slot passes straight to the first in line."""
        with self.cond:
            if self.closed or not self.waiting:
                self.free += 1
                return
            _, request = self.waiting.popleft()
        self.start(request)

    def _expire(self) -> None:
        while True:
            expired = []
            with self.cond:
                if self.closed:
                    return
                now = time.monotonic()
                while self.waiting and self.waiting[0][0] <= now:
                    expired.append(self.waiting.popleft()[1])
                if not expired:
                    self.cond.wait(self.waiting[0][0] - now if self.waiting else None)
            for request in expired:
                self.reject(request, QUEUE_TIMEOUT_MESSAGE)

    def close(self, why: str) -> None:
        """Unloading: nothing more starts; whoever still waits is answered."""
        with self.cond:
            self.closed = why
            waiting = [request for _, request in self.waiting]
            self.waiting.clear()
            self.cond.notify_all()
        for request in waiting:
            self.reject(request, why)


def _tensor(source, name: str, as_name: str):
    tensor = pb_utils.get_input_tensor_by_name(source, name)
    return None if tensor is None else pb_utils.Tensor(as_name, tensor.as_numpy())


def _str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _check(response, model: str):
    if response.has_error():
        raise StepFailed(f"{model}: {response.error().message()}")
    return response


REPLACEMENT = "\ufffd"  # what a decoder makes of an incomplete UTF-8 sequence


class Detokenizer:
    """One beam's tokens so far and the window that is decoded next: tokens before `prefix` are
    answered and out of the window, those in [prefix, read) are answered context."""

    def __init__(self, decode):
        self.decode = decode  # (window ids, context length) -> the text the rest adds
        self.ids: list = []
        self.prefix = self.read = 0

    def push(self, new: list) -> str:
        self.ids.extend(new)
        text = self.decode(self.ids[self.prefix:], self.read - self.prefix)
        if not text or text.endswith(REPLACEMENT):
            return ""  # hold back: the next tokens complete the character
        self.prefix, self.read = self.read, len(self.ids)
        return text

    def flush(self) -> str:
        """At the end: whatever is held back (a sequence that really ends mid-character)."""
        if self.read >= len(self.ids):
            return ""
        text = self.decode(self.ids[self.prefix:], self.read - self.prefix)
        self.prefix, self.read = self.read, len(self.ids)
        return text


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.pre, self.engine, self.post = p["preprocessing_model"], p["tensorrt_llm_model"], p["postprocessing_model"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        slots = max(int(p["max_inflight_requests"]), 1)
        self.pool = ThreadPoolExecutor(max_workers=slots)
        self.admission = Admission(slots, int(p["max_queue_size"]), int(p["queue_timeout_ms"]) / 1000,
                                   start=lambda request: self.pool.submit(self._serve, request),
                                   reject=self._reject)

    def _call(self, model: str, inputs: list, outputs: list):
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        return _check(request.exec(), model)

    def _decode(self, ids: list, context: int) -> str:
        inputs = [pb_utils.Tensor("output_ids", np.array([[ids]], dtype=np.int32)),
                  pb_utils.Tensor("sequence_length", np.array([[len(ids)]], dtype=np.int32)),
                  pb_utils.Tensor("prefix_length", np.array([[context]], dtype=np.int32))]
        post = self._call(self.post, inputs, ["text"])
        return _str(pb_utils.get_output_tensor_by_name(post, "text").as_numpy().reshape(-1)[0])

    def _new_tokens(self, engine_response) -> list:
        """Per beam, the tokens this engine response adds."""
        ids = pb_utils.get_output_tensor_by_name(engine_response, "output_ids").as_numpy()
        lengths = pb_utils.get_output_tensor_by_name(engine_response, "sequence_length").as_numpy().reshape(-1)
        ids = ids.reshape(-1, ids.shape[-1])
        return [beam[:max(int(n), 0)].tolist() for beam, n in zip(ids, lengths)]

    def _run(self, request, send):
        pre_inputs = [t for t in (_tensor(request, k, v) for k, v in PRE_INPUTS.items()) if t is not None]
        pre = self._call(self.pre, pre_inputs, list(PRE_TO_ENGINE))
        inputs = [pb_utils.Tensor(dst, pb_utils.get_output_tensor_by_name(pre, src).as_numpy())
                  for src, dst in PRE_TO_ENGINE.items()]
        inputs += [t for t in (_tensor(request, k, v) for k, v in ENGINE_INPUTS.items()) if t is not None]
        call = pb_utils.InferenceRequest(model_name=self.engine, inputs=inputs,
                                         requested_output_names=["output_ids", "sequence_length"])
        beams: list = []

        def emit(texts: list) -> None:
            if any(texts):
                send(np.array([[t.encode("utf-8") for t in texts]], dtype=np.object_))

        def step(response) -> None:
            new = self._new_tokens(response)
            while len(beams) < len(new):
                beams.append(Detokenizer(self._decode))
            emit([d.push(ids) for d, ids in zip(beams, new)])

        if not self.decoupled:
            step(_check(call.exec(), self.engine))
        else:
            for response in call.exec(decoupled=True):
                _check(response, self.engine)
                if pb_utils.get_output_tensor_by_name(response, "output_ids") is not None:
                    step(response)
        emit([d.flush() for d in beams])

    @staticmethod
    def _response(text=None, error=None):
        if error is not None:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", text)])

    def _decoupled(self, request):
        sender = request.get_response_sender()
        try:
            self._run(request, lambda text: sender.send(self._response(text)))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as e:
            sender.send(self._response(error=str(e)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _single(self, request):
        """Not decoupled: exactly one response, the whole text (the pieces joined)."""
        sender = request.get_response_sender()
        pieces = []
        try:
            self._run(request, pieces.append)
            joined = ["".join(_str(p[0][b]) for p in pieces) for b in range(len(pieces[0][0]))] if pieces else [""]
            response = self._response(np.array([[t.encode("utf-8") for t in joined]], dtype=np.object_))
        except Exception as e:
            response = self._response(error=str(e))
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _serve(self, request):
        try:
            (self._decoupled if self.decoupled else self._single)(request)
        finally:
            self.admission.done()

    @staticmethod
    def _reject(request, why: str):
        error = pb_utils.TritonError(why, pb_utils.TritonError.UNAVAILABLE)
        request.get_response_sender().send(pb_utils.InferenceResponse(error=error),
                                           flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        for request in requests:
            self.admission.submit(request)
        return None

    def finalize(self):
        self.admission.close("the model is being unloaded")
        self.pool.shutdown(wait=True)
