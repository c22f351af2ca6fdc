"""The quickstart's Triton repository, as the build writes it, served by a real `tritonserver` (the
binary and Python backend of the nvidia-pytriton wheel) on 127.0.0.1.

engine target: kiln's preprocessing and postprocessing models load and answer real HTTP requests
with the model's own tokenizer, the BLS model loads and reaches the engine model; the engine model
(`tensorrtllm` backend) fails to load for one reason only, its backend library is absent on this
machine, and the ensemble fails only because that model did.
llmapi target: the config is accepted and the model fails only because `tensorrt_llm` cannot be
imported here (no GPU build of TensorRT-LLM).

The engine target's Python models run with the runtime's transformers (the `runtime_transformers`
fixture), the version the runtime's container tokenizes with; the test compares their answers
with the test venv's tokenizer.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.test_triton_repo import QUICK_MODEL, quickstart_copy, run_action
from tests.tritonserver import TritonServer, TritonUnavailable

PROMPT = "Kiln compiles one reviewed spec into Triton repositories."
# what may appear in the log only for the reasons asserted below: anything else is a config problem
CONFIG_ERRORS = ("Error parsing text-format", "failed to read text proto", "unexpected", "invalid argument",
                 "is not mapped", "inconsistent", "must be", "should be")


def serve(target: str, tmp: Path, python_env: Path | None = None):
    try:
        out = run_action(quickstart_copy(tmp, target), "dev-h100", QUICK_MODEL, tmp)  # the quickstart's repository
        server = TritonServer(out, tmp, python_env=python_env)
    except TritonUnavailable as e:
        pytest.fail(f"{e}: the test extra installs it")
    try:
        server.wait_live()  # the server loads every model of --load-model before it listens
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def engine(tmp_path_factory, runtime_transformers):
    server = serve("engine", tmp_path_factory.mktemp("triton-engine"), runtime_transformers.dir)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def llmapi(tmp_path_factory):
    server = serve("llmapi", tmp_path_factory.mktemp("triton-llmapi"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(QUICK_MODEL)


def strings(name: str, values: list[str]) -> dict:
    return {"name": name, "shape": [1, len(values)], "datatype": "BYTES", "data": values}


def ints(name: str, values: list[int], shape: list[int] | None = None) -> dict:
    return {"name": name, "shape": shape or [1, len(values)], "datatype": "INT32", "data": values}


def outputs(body: dict) -> dict[str, dict]:
    return {o["name"]: o for o in body["outputs"]}


def foreign_errors(log: str, allowed: tuple[str, ...]) -> list[str]:
    """Error lines of the server log that none of the allowed reasons explains."""
    out = []
    for line in log.splitlines():
        if re.match(r"^E\d{4} ", line) and "CudaDriverHelper" not in line and not any(a in line for a in allowed):
            out.append(line)
    return out


# --- engine target ------------------------------------------------------------------------------
def test_engine_models_load_except_the_engine_for_want_of_its_backend(engine) -> None:
    index = engine.index()
    assert set(index) == {f"{m}{part}" for m in ("tiny", "tiny-awq")
                          for part in ("", "-preprocessing", "-tensorrt_llm", "-postprocessing", "-bls")}
    for name in ("tiny-preprocessing", "tiny-postprocessing", "tiny-bls"):
        assert index[name]["state"] == "READY", (name, index[name], engine.log()[-4000:])
    trt = index["tiny-tensorrt_llm"]
    assert trt["state"] == "UNAVAILABLE"
    assert trt["reason"] == ("Invalid argument: unable to find backend library for backend 'tensorrtllm', "
                             "try specifying runtime on the model configuration."), trt
    assert index["tiny"].get("state") != "READY"
    log = engine.log()
    # the ensemble passed Triton's validation and waits only on its engine step (its reason is logged)
    why = [line for line in log.splitlines() if "ensemble 'tiny'" in line]
    assert len(why) == 1, why
    assert "ensemble 'tiny' depends on 'tiny-tensorrt_llm' which has no loaded version" in why[0]
    assert "unable to find backend library for backend 'tensorrtllm'" in why[0]
    # the engine model's failure is the only one: no parse, mapping or shape complaint anywhere
    assert foreign_errors(log, ("unable to find backend library for backend 'tensorrtllm'",
                                "failed to load all models")) == []
    assert not any(e in log for e in CONFIG_ERRORS[:2])


def test_preprocessing_tokenizes_with_the_model_tokenizer(engine, tokenizer) -> None:
    status, body = engine.infer("tiny-preprocessing", [strings("text", [PROMPT]), ints("max_tokens", [7]),
                                                        strings("stop_words", [" Triton", "."])])
    assert status == 200, body
    out = outputs(body)
    want = tokenizer(PROMPT).input_ids
    assert out["input_ids"]["data"] == want and out["input_ids"]["shape"] == [1, len(want)]
    assert out["input_lengths"]["data"] == [len(want)]
    assert out["request_output_len"]["data"] == [7]
    assert out["out_end_id"]["data"] == [tokenizer.eos_token_id]
    stop = [tokenizer.encode(w, add_special_tokens=False) for w in (" Triton", ".")]
    flat = stop[0] + stop[1]
    assert out["stop_words_list"]["shape"] == [1, 2, len(flat)]
    offsets = [len(stop[0]), len(flat)] + [-1] * (len(flat) - 2)
    assert out["stop_words_list"]["data"] == flat + offsets
    assert out["bad_words_list"]["data"] == [0, -1]  # no words: one padded column


def test_preprocessing_rejects_a_prompt_beyond_max_input_len(engine) -> None:
    status, body = engine.infer("tiny-preprocessing", [strings("text", ["word " * 400]), ints("max_tokens", [1])])
    assert status == 400 and "this model accepts at most 256" in body["error"], body


def test_postprocessing_decodes_generated_ids(engine, tokenizer) -> None:
    ids = tokenizer("Generated text, decoded by the server.").input_ids
    status, body = engine.infer("tiny-postprocessing", [ints("output_ids", ids + [0, 0], [1, 1, len(ids) + 2]),
                                                         ints("sequence_length", [len(ids)], [1, 1])])
    assert status == 200, body
    assert outputs(body)["text"]["data"] == [tokenizer.decode(ids, skip_special_tokens=True)]


def test_bls_runs_preprocessing_and_reaches_the_engine_model(engine) -> None:
    status, body = engine.infer("tiny-bls", [strings("text_input", [PROMPT]), ints("max_tokens", [4])])
    assert status != 200
    assert "tiny-tensorrt_llm" in body["error"] and "not ready" in body["error"], body
    status, body = engine.infer("tiny-bls", [strings("text_input", ["word " * 400]), ints("max_tokens", [4])])
    assert "tiny-preprocessing" in body["error"] and "at most 256" in body["error"], body


# --- llmapi target ------------------------------------------------------------------------------
def test_llmapi_model_fails_only_for_want_of_tensorrt_llm(llmapi) -> None:
    index = llmapi.index()
    assert set(index) == {"tiny", "tiny-awq"}
    tiny = index["tiny"]
    assert tiny["state"] == "UNAVAILABLE"
    assert "ModuleNotFoundError: No module named 'tensorrt_llm'" in tiny["reason"], tiny
    assert "model.py" in tiny["reason"] and "initialize" in tiny["reason"], tiny  # config accepted, code ran
    log = llmapi.log()
    assert foreign_errors(log, ("No module named 'tensorrt_llm'", "failed to load all models")) == []
    assert not any(e in log for e in CONFIG_ERRORS[:2])


# --- the ensemble, with a stand-in for the one model that cannot run here -----------------------
# Triton validates an ensemble's wiring (types, shapes, mappings) only once every step has loaded.
# The TensorRT-LLM backend needs a GPU build, so these tests replace that one model's backend with
# a Python stand-in that keeps its generated interface (inputs, outputs, batching, queue policy)
# and the backend's own request handling (inflight_batcher_llm/src/utils.cc, 1.2.x: the batch
# split's shape rules, one executor request per prompt, batch > 1 only when decoupled, the input
# names it reads), and in place of an engine echoes each prompt's ids, then the seed when one
# arrives as `seed`, taking 10 ms per requested token. Decoupled, it takes every request at once (the
# backend's enqueue() hands each to the executor, so Triton's queue never holds one) into an executor
# queue, generates up to the model's max_batch_size of them side by side (one Triton request is one
# executor request here), answering one response per token when `streaming` is set and one holding
# every token when not, as the backend does; a request with `stop` true ends the request with its id
# (taken out of the queue at once, or ended at its next step, as the executor's cancelRequest) and is
# answered with an empty final response. It logs `kiln-engine-standin: queued`, `generating`, `done`,
# `cancelled while queued` and `cancelled while generating`.
# Everything else is as built.
STANDIN = '''
import json
import sys
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


def _get(r, name):
    t = pb_utils.get_input_tensor_by_name(r, name)
    return None if t is None else t.as_numpy()


def _log(message):
    print(f"kiln-engine-standin: {message}", file=sys.stderr, flush=True)


class Job:
    def __init__(self, r, prompts):
        self.rid, self.request, self.prompts = r.request_id(), r, prompts
        self.sender = r.get_response_sender()
        self.steps = max(max(n for _, n in prompts), 1)  # 10 ms per requested token
        self.stopped = False


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.limit = max(int(config.get("max_batch_size") or 1), 1)
        self.queued, self.active = [], []
        self.cond = threading.Condition()
        if self.decoupled:
            threading.Thread(target=self._schedule, daemon=True).start()

    def _prompts(self, r):
        """splitBatchInputsTensors and createRequestsFromInputTensors, as the backend does them."""
        ids = _get(r, "input_ids")
        if ids.ndim != 2:
            raise ValueError("Expected inputTokens tensors to have 2 dimensions")
        batch = ids.shape[0]
        lengths = _get(r, "input_lengths")
        if batch > 1 and lengths.ndim != 1:
            raise ValueError("Expected inputLengths tensors to have 1 dimension")
        if not self.decoupled and batch > 1:
            raise ValueError("Batch size > 1 requires the tensorrt_llm backend to be using decoupled "
                             "transaction policy")
        prompts = []
        for b in range(batch):
            def one(name):  # ITensor::slice(b, 1), then extractSingleton: exactly one value
                t = _get(r, name)
                if t is None:
                    return None
                t = t[b:b + 1] if batch > 1 else t
                if t.size != 1:
                    raise ValueError("Invalid size for tensor " + name)
                return t.reshape(-1)[0].item()
            n = int(lengths.reshape(-1)[b])
            out = [int(x) for x in ids[b, :n]]
            seed = one("seed")
            prompts.append((out + ([seed] if seed is not None else []), one("request_output_len")))
        return prompts

    def _streaming(self, r):
        """`streaming` (default false): one response per token, else one holding them all."""
        flag = _get(r, "streaming")
        return flag is not None and bool(flag.reshape(-1)[0])

    def execute(self, requests):
        if not self.decoupled:
            out = []
            for r in requests:
                try:
                    (ids, n), = self._prompts(r)
                    time.sleep(n / 100)
                    out.append(pb_utils.InferenceResponse([
                        pb_utils.Tensor("output_ids", np.array([[ids]], dtype=np.int32)),
                        pb_utils.Tensor("sequence_length", np.array([[len(ids)]], dtype=np.int32))]))
                except ValueError as e:
                    out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
            return out
        for r in requests:  # as the backend's enqueue(): every request to the executor at once
            stop = _get(r, "stop")
            if stop is not None and bool(stop.reshape(-1)[0]):
                self._stop(r)
                continue
            try:
                job = Job(r, self._prompts(r))
            except ValueError as e:
                r.get_response_sender().send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))),
                                             flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            with self.cond:
                self.queued.append(job)
                _log(f"queued {len(self.queued)}")
                self.cond.notify()
        return None

    def _stop(self, r):
        with self.cond:
            job = next((j for j in self.queued if j.rid == r.request_id()), None)
            if job is not None:
                self.queued.remove(job)
                _log(f"cancelled while queued; queued {len(self.queued)}")
            for j in self.active:
                if j.rid == r.request_id():
                    j.stopped = True
        if job is not None:
            job.sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        r.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _schedule(self):
        """The executor's loop: admit queued requests up to the limit, one 10 ms step for all."""
        while True:
            with self.cond:
                while len(self.active) < self.limit and self.queued:
                    job = self.queued.pop(0)
                    self.active.append(job)
                    _log(f"generating {len(job.prompts)}")
                if not self.active:
                    self.cond.wait(0.05)
                    continue
            time.sleep(0.01)
            with self.cond:
                for job in self.active:
                    job.steps -= 1
                ended = [job for job in self.active if job.steps <= 0 or job.stopped]
                for job in ended:
                    self.active.remove(job)
            for job in ended:
                if job.stopped:
                    _log("cancelled while generating")
                    job.sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                else:
                    self._answer(job.request, job.sender, job.prompts)

    def _answer(self, r, sender, prompts):
        streaming = self._streaming(r)
        for index, (ids, n) in enumerate(prompts):
            # streaming: one response per token and prompt, as the streaming backend sends them
            for part in ([[t] for t in ids] if streaming else [ids]):
                tensors = [pb_utils.Tensor("output_ids", np.array([[part]], dtype=np.int32)),
                           pb_utils.Tensor("sequence_length", np.array([[len(part)]], dtype=np.int32))]
                if len(prompts) > 1:
                    tensors.append(pb_utils.Tensor("batch_index", np.array([[index]], dtype=np.int32)))
                sender.send(pb_utils.InferenceResponse(tensors))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        print("kiln-engine-standin: done", file=sys.stderr, flush=True)
'''


def with_standin_engine(repo: Path) -> None:
    config = repo / "tiny-tensorrt_llm" / "config.pbtxt"
    text = config.read_text(encoding="utf-8")
    assert text.count('backend: "tensorrtllm"') == 1
    config.write_text(text.replace('backend: "tensorrtllm"', 'backend: "python"'), encoding="utf-8")
    (repo / "tiny-tensorrt_llm" / "1" / "model.py").write_text(STANDIN, encoding="utf-8")


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory, runtime_transformers):
    tmp = tmp_path_factory.mktemp("triton-ensemble")
    out = run_action(quickstart_copy(tmp, "engine", one_model=True), "dev-h100", QUICK_MODEL, tmp)
    with_standin_engine(out)
    server = TritonServer(out, tmp, python_env=runtime_transformers.dir)
    try:
        server.wait_live()
    except BaseException:
        server.stop()
        raise
    yield server
    server.stop()


def test_triton_accepts_the_ensemble_and_answers_through_it(ensemble, tokenizer) -> None:
    index = ensemble.index()
    assert all(m.get("state") == "READY" for m in index.values()), (index, ensemble.log()[-4000:])
    status, body = ensemble.infer("tiny", [strings("text_input", [PROMPT]), ints("max_tokens", [3])])
    assert status == 200, body
    ids = tokenizer(PROMPT).input_ids
    assert outputs(body)["text_output"]["data"] == [tokenizer.decode(ids, skip_special_tokens=True)]
    status, body = ensemble.infer("tiny-bls", [strings("text_input", [PROMPT]), ints("max_tokens", [3])])
    assert status == 200, body
    assert outputs(body)["text_output"]["data"] == [tokenizer.decode(ids, skip_special_tokens=True)]
    # the ensemble does not stream (it would decode each response alone): refused, naming the BLS
    stream = {"name": "stream", "shape": [1, 1], "datatype": "BOOL", "data": [True]}
    status, body = ensemble.infer("tiny", [strings("text_input", [PROMPT]), ints("max_tokens", [3]), stream])
    assert status == 400 and "send streaming requests to model 'tiny-bls'" in body["error"], body


def test_the_seed_reaches_the_engine_under_the_name_the_backend_reads(ensemble, tokenizer) -> None:
    """The backend reads `seed` (utils.h InputFieldsNames::seed); under any other name a client's
    seed is dropped without a word. The stand-in echoes what it reads as `seed`."""
    ids = tokenizer(PROMPT).input_ids
    for model in ("tiny", "tiny-bls"):
        status, body = ensemble.infer(model, [strings("text_input", [PROMPT]), ints("max_tokens", [2]),
                                              {"name": "seed", "shape": [1, 1], "datatype": "UINT64", "data": [7]}])
        assert status == 200, (model, body)
        assert outputs(body)["text_output"]["data"] == [tokenizer.decode(ids + [7], skip_special_tokens=True)], model


def test_queue_timeout_rejects_instead_of_waiting(ensemble) -> None:
    """Admission control as generated: the engine model's queue rejects a request that waited
    longer than serving.queue_timeout_ms (1000 ms in the quickstart) behind a busy instance."""
    import threading

    busy = threading.Thread(target=ensemble.infer, args=("tiny", [strings("text_input", ["busy"]),
                                                                  ints("max_tokens", [300])]))
    busy.start()
    time.sleep(0.5)
    started = time.monotonic()
    status, body = ensemble.infer("tiny", [strings("text_input", ["queued"]), ints("max_tokens", [1])])
    waited = time.monotonic() - started
    busy.join()
    assert status != 200 and "timeout" in body["error"].lower(), body
    assert 0.9 < waited < 2.5, waited  # rejected after about the timeout, long before the busy request ends


def test_triton_refuses_an_ensemble_that_kiln_refuses(tmp_path, runtime_transformers) -> None:
    """The same broken wiring, judged by kiln's rules and by the real server."""
    from compiler.serving import rules

    out = run_action(quickstart_copy(tmp_path, "engine", one_model=True), "dev-h100", QUICK_MODEL, tmp_path)
    with_standin_engine(out)
    ens = out / "tiny" / "config.pbtxt"
    ens.write_text(ens.read_text(encoding="utf-8").replace(
        'name: "max_tokens"\n    data_type: TYPE_INT32', 'name: "max_tokens"\n    data_type: TYPE_INT64', 1),
        encoding="utf-8")
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert any("input 'max_tokens' is TYPE_INT32 but ensemble input 'max_tokens'" in p
               for p in rules.check_repository(files))
    server = TritonServer(out, tmp_path, python_env=runtime_transformers.dir)
    try:
        server.wait_live()
        assert server.index()["tiny"].get("state") != "READY"
        why = [line for line in server.log().splitlines() if "ensemble 'tiny'" in line or "in ensemble tiny" in line]
        assert why and "max_tokens" in " ".join(why) and "TYPE_INT64" in " ".join(why), server.log()[-3000:]
    finally:
        server.stop()


def streaming_repository(tmp: Path) -> Path:
    """The quickstart's engine repository with serving.streaming, the stand-in as its engine."""
    spec = quickstart_copy(tmp, "engine", one_model=True)
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("queue_timeout_ms: 1000}", "queue_timeout_ms: 1000, streaming: true}", 1),
                    encoding="utf-8")
    out = run_action(spec, "dev-h100", QUICK_MODEL, tmp)
    assert "decoupled: true" in (out / "tiny-tensorrt_llm" / "config.pbtxt").read_text(encoding="utf-8")
    with_standin_engine(out)
    return out


@pytest.fixture(scope="module")
def streaming(tmp_path_factory, runtime_transformers):
    tmp = tmp_path_factory.mktemp("triton-streaming")
    server = TritonServer(streaming_repository(tmp), tmp, python_env=runtime_transformers.dir)
    try:
        server.wait_live()
    except BaseException:
        server.stop()
        raise
    yield server
    server.stop()


def test_triton_accepts_the_streaming_pipeline(streaming) -> None:
    """serving.streaming: the engine model and the BLS are decoupled; Triton loads the ensemble
    over the decoupled step (its validation includes the decoupled-origin rule)."""
    index = streaming.index()
    assert all(m.get("state") == "READY" for m in index.values()), (index, streaming.log()[-4000:])
    # an ensemble asks for a CUDA stream; on a machine without a GPU that is logged and ignored
    assert foreign_errors(streaming.log(), ("CUDA driver version is insufficient",)) == []
    # two prompts in one request reach the engine model split, one executor request each
    # (the backend's batch split needs input_lengths as [batch]: reshape: { shape: [ ] })
    got = two_prompts(streaming)
    assert got == {0: [11, 12, 13], 1: [21, 22]}, got


def two_prompts(server: TritonServer) -> dict:
    """A two-prompt request straight to the decoupled engine model over a gRPC stream: the ids each
    prompt's responses carry, by batch_index (or the error)."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name, array, kind):
        t = grpcclient.InferInput(name, list(array.shape), kind)
        t.set_data_from_numpy(array)
        return t

    inputs = [tensor("input_ids", np.array([[11, 12, 13], [21, 22, 0]], dtype=np.int32), "INT32"),
              tensor("input_lengths", np.array([[3], [2]], dtype=np.int32), "INT32"),
              tensor("request_output_len", np.array([[1], [1]], dtype=np.int32), "INT32")]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    client.async_stream_infer("tiny-tensorrt_llm", inputs, enable_empty_final_response=True)
    got: dict = {}
    try:
        while True:
            result, error = answers.get(timeout=30)
            if error is not None:
                return {"error": str(error)}
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                return got
            index = int(result.as_numpy("batch_index").reshape(-1)[0])
            got.setdefault(index, []).extend(int(x) for x in result.as_numpy("output_ids").reshape(-1))
    finally:
        client.stop_stream()
        client.close()


# --- streamed text is whole characters (issue 22, item 4) ---------------------------------------
# A token is not always a character: the quickstart's byte-level BPE spreads "🙂" and "“" over
# several tokens, and a byte-fallback tokenizer (SentencePiece style, <0xNN> tokens) gives one
# token per byte. Decoding each streamed response's tokens alone turned this text into
# 'na��ve caf�� ��� ���quoted��� ����'; the stand-in engine streams the prompt's ids back one per
# response, so the streamed pieces must join to the prompt exactly.
UNICODE = "naïve café — “quoted” 🙂 中文字符 ok"


def byte_fallback_tokenizer(dest: Path) -> None:
    """A SentencePiece-style tokenizer: ASCII characters, every other byte as a <0xNN> token."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    for c in map(chr, range(32, 127)):
        vocab[c] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>").save_pretrained(dest)
    # the class name a hub checkpoint carries: transformers 5 saves "TokenizersBackend", which the
    # runtime's transformers 4 (the served models' environment) does not know
    config = dest / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text(encoding="utf-8")),
                                  "tokenizer_class": "PreTrainedTokenizerFast"}), encoding="utf-8")


def stream_answers(server: TritonServer, model: str, prompt: str, stream: bool = True,
                   max_tokens: int = 1) -> tuple[list[str], str | None]:
    """Over a gRPC stream: the text of each response to one request, and the error if one came."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name, array, kind):
        t = grpcclient.InferInput(name, list(array.shape), kind)
        t.set_data_from_numpy(array)
        return t

    inputs = [tensor("text_input", np.array([[prompt.encode()]], dtype=np.object_), "BYTES"),
              tensor("max_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
              tensor("stream", np.array([[stream]]), "BOOL")]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    client.async_stream_infer(model, inputs, enable_empty_final_response=True)
    pieces = []
    try:
        while True:
            result, error = answers.get(timeout=60)
            if error is not None:
                return pieces, str(error)
            text = result.as_numpy("text_output")  # the final response may carry text (the ensemble's)
            if text is not None:
                pieces.append(text.reshape(-1)[0].decode("utf-8"))
            if result.get_response().parameters["triton_final_response"].bool_param:
                return pieces, None
    finally:
        client.stop_stream()
        client.close()


def check_streamed_text(server: TritonServer, tok) -> None:
    ids = tok(UNICODE).input_ids
    singly = "".join(tok.decode([i], skip_special_tokens=True) for i in ids)
    assert "\ufffd" in singly  # the test's text does split characters over tokens
    pieces, error = stream_answers(server, "tiny-bls", UNICODE)
    assert error is None, error
    assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True) == UNICODE, pieces
    assert len(pieces) > 5 and not any("\ufffd" in p for p in pieces), pieces  # streamed, not one piece
    # the ensemble would decode each streamed response alone: it refuses to stream, naming the BLS,
    # and answers the whole text when not asked to stream
    pieces, error = stream_answers(server, "tiny", UNICODE)
    assert pieces == [] and error is not None and "model 'tiny-bls'" in error and "stream" in error, error
    assert stream_answers(server, "tiny", UNICODE, stream=False) == ([UNICODE], None)


def test_streamed_text_joins_to_whole_characters(streaming, tokenizer) -> None:
    check_streamed_text(streaming, tokenizer)


def test_streamed_byte_fallback_tokens_join_to_whole_characters(tmp_path, runtime_transformers) -> None:
    from transformers import AutoTokenizer

    out = streaming_repository(tmp_path)
    for model in ("tiny-preprocessing", "tiny-postprocessing"):
        shutil.rmtree(out / model / "tokenizer")
        byte_fallback_tokenizer(out / model / "tokenizer")
    server = TritonServer(out, tmp_path, python_env=runtime_transformers.dir)
    try:
        server.wait_live()
        check_streamed_text(server, AutoTokenizer.from_pretrained(out / "tiny-postprocessing" / "tokenizer"))
    finally:
        server.stop()


# --- the BLS bounds waiting where the engine backend cannot (issue 22, item 5) ------------------
def engine_started(server: TritonServer) -> int:
    return server.log().count("kiln-engine-standin: generating")


def engine_events(server: TritonServer, what: str) -> int:
    return server.log().count(f"kiln-engine-standin: {what}")


def test_bls_admission_rejects_only_beyond_capacity(streaming) -> None:
    """The backend takes every request at once, so the engine model's queue timeout never fires;
    the BLS passes limits.max_batch_size (8) requests on, and 2 more (ceil(8 / 4)) ahead of a slot
    into the executor's queue; the next waits in the BLS. None gets a slot within
    serving.queue_timeout_ms (1000 ms): each is rejected as Triton's queue would, the ones sent on
    are stopped in the engine (never generated), while the others run on."""
    import threading

    def job(box, tokens):
        box["result"] = stream_answers(streaming, "tiny-bls", PROMPT, stream=False, max_tokens=tokens)

    def start(n, tokens):
        out = []
        for _ in range(n):
            box: dict = {}
            out.append((threading.Thread(target=job, args=(box, tokens)), box))
            out[-1][0].start()
        return out

    def wait_until(what, n):
        deadline = time.monotonic() + 60
        while engine_events(streaming, what) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine_events(streaming, what) == n, streaming.log()[-3000:]

    mark, queued, stopped = (engine_started(streaming), engine_events(streaming, "queued"),
                             engine_events(streaming, "cancelled while queued"))
    jobs = start(8, 600)
    wait_until("generating", mark + 8)
    ahead = start(2, 1)
    wait_until("queued", queued + 8 + 2)
    started = time.monotonic()
    pieces, error = stream_answers(streaming, "tiny-bls", PROMPT, stream=False)
    waited = time.monotonic() - started
    assert pieces == [] and error is not None and "Request timeout expired" in error, error
    assert 0.9 < waited < 3.5, waited
    assert all(thread.is_alive() for thread, _ in jobs)  # rejected while they all still ran
    for thread, box in ahead:
        thread.join()
        assert box["result"][0] == [] and "Request timeout expired" in (box["result"][1] or ""), box["result"]
    sent_on = engine_events(streaming, "queued") - queued - 8
    assert 2 <= sent_on <= 3, sent_on  # the headroom; the last one took a place an expired one left
    wait_until("cancelled while queued", stopped + sent_on)  # each one sent on was stopped in the engine
    assert engine_started(streaming) == mark + 8  # and none was generated
    for thread, _ in jobs:
        thread.join()
    assert [box["result"][1] for _, box in jobs] == [None] * 8, [box["result"] for _, box in jobs]
    assert engine_started(streaming) == mark + 8
