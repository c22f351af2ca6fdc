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
policy covers only requests that wait for execute()). Up to `max_inflight_requests` requests hold
a slot in the engine; when the engine model is decoupled a few more (HEADROOM_DIVISOR) are sent on
ahead, into the executor's own queue, and take the slots as they free, oldest first; the next wait
here, first come first served, at most `max_queue_size` of them. A request that holds no slot
within `queue_timeout_ms` (0: unbounded) is rejected as Triton's queue rejects (UNAVAILABLE, the
same messages) and, if it was sent on, stopped in the engine. Nothing waits while there is room.

Text is detokenized incrementally (the technique of vLLM's and TGI's streaming detokenizers): a
token is not always a whole character (byte-level BPE spreads "🙂" over several tokens, a
byte-fallback token is one byte), so each step decodes a window of the request's tokens after a
context of the ones already answered, and a text ending in an incomplete character (U+FFFD) is
held back until the tokens that complete it arrive. Streamed pieces concatenate to the text of
the whole sequence.
"""

import collections
import itertools
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


# Admitted requests beyond max_batch_size whose engine request is already sent (in the executor's
# own queue), so that the executor fills a freed slot in the same iteration instead of after
# preprocessing and a round trip through this model (issue 22, item 5; docs/serving-admission.md).
# A quarter of the batch, at least one; each is still bounded by queue_timeout_ms: one that gets no
# slot in time is stopped in the engine (the backend's `stop` input with the engine request's id).
# Only where the engine model is decoupled: that is where the backend answers a stop at once.
HEADROOM_DIVISOR = 4


def headroom(slots: int) -> int:
    return -(-slots // HEADROOM_DIVISOR)


class Job:
    """One request: its place in admission, its engine request, whether its final answer is sent."""

    ids = itertools.count(1)

    def __init__(self, request, deadline):
        self.request, self.deadline = request, deadline
        self.sender = None  # the request's response sender, taken at the first answer
        self.stage = "waiting"  # waiting, ahead (sent on, no slot), slot, expired, gone
        self.lock = threading.Lock()
        self.final = False
        self.expired = False
        self.engine_id = ""  # the engine request's id, once it is sent

    def send(self, response=None, final: bool = False) -> None:
        """Nothing follows a final answer (a timed-out request's engine answers come after it)."""
        with self.lock:
            if self.final:
                return
            self.final = final
            if self.sender is None:
                self.sender = self.request.get_response_sender()
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            if response is None:
                self.sender.send(flags=flags)
            else:
                self.sender.send(response, flags=flags)


class Admission:
    """Slots for requests in the engine (`holding`), a few admitted requests sent on ahead of a slot
    (`ahead`, in the order they were sent: the executor's queue order) and a first-come queue for
    the rest (`waiting`). A request must hold a slot within `timeout_s` of its arrival, or it is
    answered with Triton's timeout (and stopped in the engine if it was sent on). `start(job)` runs
    a job sent on (and calls done(job) when it leaves), `reject(job, why)` answers one turned away,
    `stop(job)` stops one in the engine. All three are called outside the lock."""

    def __init__(self, slots: int, headroom: int, max_queue: int, timeout_s: float, start, reject, stop):
        self.slots, self.headroom, self.max_queue, self.timeout_s = slots, headroom, max_queue, timeout_s
        self.start, self.reject, self.stop = start, reject, stop
        self.holding = 0
        self.ahead: collections.deque = collections.deque()
        self.waiting: collections.deque = collections.deque()
        self.cond = threading.Condition()
        self.closed = ""  # once unloading: why nothing starts any more
        if timeout_s:
            threading.Thread(target=self._expire, name="kiln-bls-queue-timeout", daemon=True).start()

    def submit(self, request) -> None:
        job = Job(request, time.monotonic() + self.timeout_s)
        with self.cond:
            if self.closed:
                why = self.closed
            elif self.max_queue and len(self.waiting) >= self.max_queue:
                why = QUEUE_FULL_MESSAGE
            else:
                why = None
                self.waiting.append(job)
                started = self._fill()
                self.cond.notify()
        if why:
            return self.reject(job, why)
        for job in started:
            self.start(job)

    def _fill(self) -> list:
        """Under the lock: slots go to the oldest jobs sent on; free places ahead go to the oldest
        waiting ones (nothing waits while there is room). The jobs to start now."""
        started = []
        while True:
            if self.holding < self.slots and self.ahead:
                job = self.ahead.popleft()
                job.stage = "slot"
                self.holding += 1
            elif self.waiting and (self.holding < self.slots or len(self.ahead) < self.headroom):
                job = self.waiting.popleft()
                job.stage = "ahead"
                self.ahead.append(job)
                started.append(job)
            else:
                return started

    def done(self, job) -> None:
        """A job left the engine: its slot passes straight to the oldest job sent on."""
        with self.cond:
            stage, job.stage = job.stage, "gone"
            if stage == "ahead":
                self.ahead.remove(job)
            elif stage == "slot":
                self.holding -= 1
            started = [] if self.closed else self._fill()
        for job in started:
            self.start(job)

    def _expire(self) -> None:
        while True:
            with self.cond:
                if self.closed:
                    return
                now = time.monotonic()
                waited = []
                while self.waiting and self.waiting[0].deadline <= now:
                    waited.append(self.waiting.popleft())
                sent = []
                while self.ahead and self.ahead[0].deadline <= now:
                    job = self.ahead.popleft()
                    job.stage = "expired"  # its thread ends once the engine has stopped it
                    sent.append(job)
                if not waited and not sent:
                    first = [q[0].deadline for q in (self.waiting, self.ahead) if q]
                    self.cond.wait(min(first) - now if first else None)
                    continue
            for job in sent + waited:  # answered first: the engine's answer to a stop must not be the final one
                self.reject(job, QUEUE_TIMEOUT_MESSAGE)
            for job in sent:
                self.stop(job)
            with self.cond:
                started = [] if self.closed else self._fill()
            for job in started:
                self.start(job)

    def close(self, why: str) -> None:
        """Unloading: nothing more starts; whoever still waits is answered."""
        with self.cond:
            self.closed = why
            waiting = list(self.waiting)
            self.waiting.clear()
            self.cond.notify_all()
        for job in waiting:
            self.reject(job, why)


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
        ahead = headroom(slots) if self.decoupled else 0
        self.pool = ThreadPoolExecutor(max_workers=slots + ahead)
        self.admission = Admission(slots, ahead, int(p["max_queue_size"]), int(p["queue_timeout_ms"]) / 1000,
                                   start=lambda job: self.pool.submit(self._serve, job),
                                   reject=self._reject, stop=self._stop)

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

    def _run(self, job, send):
        request = job.request
        pre_inputs = [t for t in (_tensor(request, k, v) for k, v in PRE_INPUTS.items()) if t is not None]
        pre = self._call(self.pre, pre_inputs, list(PRE_TO_ENGINE))
        inputs = [pb_utils.Tensor(dst, pb_utils.get_output_tensor_by_name(pre, src).as_numpy())
                  for src, dst in PRE_TO_ENGINE.items()]
        inputs += [t for t in (_tensor(request, k, v) for k, v in ENGINE_INPUTS.items()) if t is not None]
        engine_id = f"kiln-bls-{next(Job.ids)}"  # what a stop names (the backend's `stop` input)
        call = pb_utils.InferenceRequest(model_name=self.engine, inputs=inputs, request_id=engine_id,
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
            # the id is known before exec(), which returns only with the engine's first response; a
            # stop that overtakes the request itself finds nothing, and the request's answers are dropped
            with job.lock:
                if job.expired:  # timed out before it was sent on: nothing to stop
                    return
                job.engine_id = engine_id
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

    def _decoupled(self, job):
        try:
            self._run(job, lambda text: job.send(self._response(text)))
            job.send(final=True)
        except Exception as e:
            job.send(self._response(error=str(e)), final=True)

    def _single(self, job):
        """Not decoupled: exactly one response, the whole text (the pieces joined)."""
        pieces = []
        try:
            self._run(job, pieces.append)
            joined = ["".join(_str(p[0][b]) for p in pieces) for b in range(len(pieces[0][0]))] if pieces else [""]
            response = self._response(np.array([[t.encode("utf-8") for t in joined]], dtype=np.object_))
        except Exception as e:
            response = self._response(error=str(e))
        job.send(response, final=True)

    def _serve(self, job):
        try:
            (self._decoupled if self.decoupled else self._single)(job)
        finally:
            self.admission.done(job)

    @staticmethod
    def _reject(job, why: str):
        error = pb_utils.TritonError(why, pb_utils.TritonError.UNAVAILABLE)
        job.send(pb_utils.InferenceResponse(error=error), final=True)

    def _stop(self, job):
        """A job sent on that got no slot in time: stop its engine request (or, not sent yet, keep
        its thread from sending it)."""
        with job.lock:
            job.expired, engine_id = True, job.engine_id
        if engine_id:
            self._stop_engine(engine_id)

    def _stop_engine(self, engine_id: str):
        # the inputs Triton requires of every request to the engine model; the backend reads only `stop`
        inputs = [pb_utils.Tensor("input_ids", np.zeros((1, 1), dtype=np.int32)),
                  pb_utils.Tensor("input_lengths", np.ones((1, 1), dtype=np.int32)),
                  pb_utils.Tensor("request_output_len", np.ones((1, 1), dtype=np.int32)),
                  pb_utils.Tensor("stop", np.array([[True]]))]
        stop = pb_utils.InferenceRequest(model_name=self.engine, request_id=engine_id, inputs=inputs,
                                         requested_output_names=["output_ids", "sequence_length"])
        try:
            for _ in stop.exec(decoupled=True):  # the backend answers a stop with an empty final response
                pass
        except Exception as e:  # the engine request ends anyway when it is done; nothing to answer
            pb_utils.Logger.log_warn(f"kiln-bls: stopping {engine_id} failed: {e}")

    def execute(self, requests):
        for request in requests:
            self.admission.submit(request)
        return None

    def finalize(self):
        self.admission.close("the model is being unloaded")
        self.pool.shutdown(wait=True)
