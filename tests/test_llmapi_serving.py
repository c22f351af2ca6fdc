"""The llmapi target's Triton model serving for real: the quickstart's repository as the build writes
it, in a real `tritonserver` (tests/tritonserver.py), with a stand-in for `tensorrt_llm`
(tests/fakes/llmapi: the pinned LLM-API surface, generating with the quickstart's torch model;
there is no GPU build of TensorRT-LLM here).

What must hold (issue 12, item 3): the model answers through the response sender without holding
Triton's instance, so requests are generated in flight together and a new one joins a running
batch; nothing is rejected while the LLM has room; a client's cancellation stops the generation;
and the tensor names are those of TensorRT-LLM's own LLM-API model.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.test_triton_repo import QUICK_MODEL, ROOT, quickstart_copy, run_action
from tests.tritonserver import TritonServer, TritonUnavailable

FACTS = ROOT / "compiler" / "actions" / "data" / "trtllm_llmapi.json"
STANDIN = ROOT / "tests" / "fakes" / "llmapi" / "tensorrt_llm"
STEP_MS = 10  # one LLM iteration, as the stand-in paces it
LONG = "A serving unit"  # a prompt the quickstart model continues greedily for 400 tokens without EOS
CAPACITY = 8  # the quickstart's limits.max_batch_size: requests the LLM generates at once
HEADROOM = 2  # admitted requests submitted ahead of a slot: ceil(CAPACITY / 4), the model's HEADROOM_DIVISOR


def serve(tmp: Path, streaming: bool = False, stream_text: str | None = None) -> TritonServer:
    spec = quickstart_copy(tmp, "llmapi", one_model=True)
    if streaming:
        extra = ", streaming: true" + (f", stream_text: {stream_text}" if stream_text else "")
        text = spec.read_text(encoding="utf-8")
        spec.write_text(text.replace("queue_timeout_ms: 1000}", f"queue_timeout_ms: 1000{extra}}}", 1),
                        encoding="utf-8")
    out = run_action(spec, "dev-h100", QUICK_MODEL, tmp)
    # what the serving image does: the checkpoint sits where model.yaml says
    options = out / "tiny" / "1" / "model.yaml"
    text = options.read_text(encoding="utf-8")
    assert text.count("model: /opt/kiln/models/tiny\n") == 1
    options.write_text(text.replace("model: /opt/kiln/models/tiny\n", f"model: {QUICK_MODEL}\n"), encoding="utf-8")
    # the stand-in goes where the Python backend imports from (the version directory)
    shutil.copytree(STANDIN, out / "tiny" / "1" / "tensorrt_llm", ignore=shutil.ignore_patterns("__pycache__"))
    try:
        server = TritonServer(out, tmp, {"KILN_LLMAPI_FACTS": str(FACTS), "KILN_STANDIN_STEP_MS": str(STEP_MS)})
    except TritonUnavailable as e:
        pytest.fail(f"{e}: the test extra installs it")
    try:
        server.wait_live()
        assert server.index()["tiny"]["state"] == "READY", server.log()[-4000:]
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = serve(tmp_path_factory.mktemp("llmapi"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    s = serve(tmp_path_factory.mktemp("llmapi-stream"), streaming=True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def greedy():
    """The quickstart model's own greedy continuation, computed here with transformers (once per
    prompt: a shorter continuation is a prefix of a longer one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)  # the server's processes need the other core
    model = AutoModelForCausalLM.from_pretrained(QUICK_MODEL, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(QUICK_MODEL)
    made: dict[str, list[int]] = {}

    def continuation(prompt: str, n: int) -> str:
        out = made.setdefault(prompt, [])
        if len(out) < n:
            ids, past, out[:] = tokenizer.encode(prompt), None, []
            with torch.no_grad():
                for _ in range(max(n, 100)):
                    logits = model(torch.tensor([out[-1:] or ids]), past_key_values=past, use_cache=True)
                    past = logits.past_key_values
                    token = int(logits.logits[0, -1].argmax())
                    assert token != tokenizer.eos_token_id
                    out.append(token)
        return tokenizer.decode(out[:n], skip_special_tokens=True)
    return continuation


def request(prompt: str, max_tokens: int, **extra) -> list[dict]:
    kinds = {bool: "BOOL", int: "INT32", float: "FP32", str: "BYTES"}
    inputs = [{"name": "text_input", "shape": [1], "datatype": "BYTES", "data": [prompt]},
              {"name": "sampling_param_max_tokens", "shape": [1], "datatype": "INT32", "data": [max_tokens]}]
    for name, value in extra.items():
        values = value if isinstance(value, list) else [value]
        inputs.append({"name": name, "shape": [len(values)], "datatype": kinds[type(values[0])], "data": values})
    return inputs


def outputs(body: dict) -> dict:
    return {o["name"]: o for o in body.get("outputs", [])}


def in_background(fn, *args, **kwargs):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=fn(*args, **kwargs), done=time.monotonic()))
    thread.start()
    return thread, box


def standin_events(server: TritonServer) -> list[str]:
    return [line.split("kiln-standin: ", 1)[1] for line in server.log().splitlines() if "kiln-standin: " in line]


def wait_for(predicate, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


# --- the interface ------------------------------------------------------------------------------
def test_answers_with_tensorrt_llm_s_own_tensor_names_and_the_model_s_text(server, greedy) -> None:
    status, body = server.infer("tiny", request(LONG, 12, return_finish_reason=True, return_stop_reason=True,
                                                return_cumulative_logprob=True,
                                                sampling_param_return_perf_metrics=True))
    assert status == 200, body
    out = outputs(body)
    assert out["text_output"]["data"] == [LONG + greedy(LONG, 12)]  # upstream's default echoes the prompt
    assert out["text_output"]["datatype"] == "BYTES" and out["text_output"]["shape"] == [1]
    assert out["finish_reason"]["data"] == ["length"] and out["stop_reason"]["data"] == ["None"]
    assert out["cumulative_logprob"]["datatype"] == "FP32" and out["cumulative_logprob"]["data"][0] < 0
    times = [out[f"{t}_time_ns"]["data"][0] for t in ("arrival", "first_scheduled", "first_token", "last_token")]
    assert times == sorted(times) and times[-1] - times[1] >= 11 * STEP_MS * 1_000_000, times
    assert out["kv_cache_alloc_total_blocks"]["datatype"] == "INT32"
    facts = json.loads(FACTS.read_text(encoding="utf-8"))["triton_model"]["outputs"]
    assert set(out) <= set(facts)
    # a stop word ends the text before it, and is named as the reason
    words = greedy(LONG, 12).split()
    status, body = server.infer("tiny", request(LONG, 12, sampling_param_stop=[words[2]], return_stop_reason=True,
                                                return_finish_reason=True,
                                                sampling_param_exclude_input_from_output=True))
    out = outputs(body)
    assert status == 200 and out["stop_reason"]["data"] == [words[2]], body
    assert out["finish_reason"]["data"] == ["stop"] and words[2] not in out["text_output"]["data"][0]


def test_request_errors_are_invalid_arguments(server) -> None:
    status, body = server.infer("tiny", request(LONG, 4, streaming=True))
    assert status == 400 and "streaming needs a decoupled model" in body["error"], body
    two = request(LONG, 4)
    two[0] = {"name": "text_input", "shape": [2], "datatype": "BYTES", "data": [LONG, LONG]}
    status, body = server.infer("tiny", two)
    assert status == 400 and "one prompt per request" in body["error"], body
    status, body = server.infer("tiny", request(LONG, 4, sampling_param_top_p=2.0))
    assert status == 400 and "top_p" in body["error"], body  # SamplingParams' own check (the stand-in's copy)


# --- in-flight batching -------------------------------------------------------------------------
def test_a_new_request_joins_the_running_batch(server, greedy) -> None:
    """The defect: execute() waited for its whole batch, so a request arriving mid-generation waited
    in Triton's queue and the 1 s queue timeout rejected it. Now it is generated next to the first."""
    long_thread, long_box = in_background(server.infer, "tiny", request(LONG, 300))
    wait_for(lambda: any("admitted" in e for e in standin_events(server)))
    time.sleep(0.3)
    started = time.monotonic()
    status, body = server.infer("tiny", request(LONG, 5))
    waited = time.monotonic() - started
    assert status == 200, body
    assert outputs(body)["text_output"]["data"] == [LONG + greedy(LONG, 5)]
    assert long_thread.is_alive(), "the long request finished first: nothing shows the short one joined it"
    assert waited < 1.0, waited  # it never waited behind the long request
    long_thread.join()
    assert long_box["result"][0] == 200, long_box
    assert long_box["done"] > started + waited


def test_nothing_is_rejected_while_the_llm_has_room(server) -> None:
    """CAPACITY requests at once, each longer than the queue timeout: all are generated together."""
    mark = len(standin_events(server))
    jobs = [in_background(server.infer, "tiny", request(LONG, 60)) for _ in range(CAPACITY)]
    for thread, _ in jobs:
        thread.join()
    results = [box["result"] for _, box in jobs]
    assert [status for status, _ in results] == [200] * CAPACITY, [b.get("error") for _, b in results]
    events = standin_events(server)[mark:]
    assert f"in flight: {CAPACITY}" in " ".join(e for e in events if "admitted" in e), events
    assert max(box["done"] for _, box in jobs) - min(box["done"] for _, box in jobs) < 2.0  # together, not in turn


def _counts(events: list[str], what: str) -> int:
    return sum(what in e for e in events)


def _queued(events: list[str]) -> list[int]:
    """The LLM's own queue length after each submission or queued abort, in order."""
    return [int(m.group(1)) for e in events for m in [re.search(r"; queued: (\d+)$", e)] if m]


def test_admission_control_rejects_only_beyond_capacity(server) -> None:
    """With the LLM generating CAPACITY requests, HEADROOM more are submitted ahead of a slot (in the
    LLM's own queue) and the next waits in the model's queue. None gets a slot within
    serving.queue_timeout_ms (1000 ms): each is answered as Triton's queue answers, and the ones
    submitted are aborted in the LLM, never generated, while the others run on."""
    mark = len(standin_events(server))
    jobs = [in_background(server.infer, "tiny", request(LONG, 150)) for _ in range(CAPACITY)]
    wait_for(lambda: _counts(standin_events(server)[mark:], "admitted") == CAPACITY)
    generating = len(standin_events(server))
    ahead = [in_background(server.infer, "tiny", request(LONG, 2)) for _ in range(HEADROOM)]
    wait_for(lambda: _counts(standin_events(server)[mark:], "submitted") == CAPACITY + HEADROOM)
    started = time.monotonic()
    status, body = server.infer("tiny", request(LONG, 2))  # beyond the headroom: waits in the model
    waited = time.monotonic() - started
    assert status == 503 and "timeout" in body["error"].lower(), body
    assert 0.9 < waited < 2.5, waited
    assert all(thread.is_alive() for thread, _ in jobs)  # rejected while they all still ran
    for thread, box in ahead:
        thread.join()
        status, body = box["result"]
        assert status == 503 and body["error"] == "Request timeout expired", body
    for thread, _ in jobs:
        thread.join()
    assert [box["result"][0] for _, box in jobs] == [200] * CAPACITY
    events = wait_for(lambda: (lambda e: e if _counts(e, "finished") == _counts(e, "submitted") else None)(
        standin_events(server)[mark:]))
    submitted, aborted = _counts(events, "submitted"), _counts(events, "aborted while queued")
    # the headroom filled; the waiting one took a place ahead only when an expired one left it
    assert HEADROOM <= submitted - CAPACITY <= HEADROOM + 1, events
    assert aborted == submitted - CAPACITY, events  # every one ahead was aborted, none generated
    assert _counts(events, "admitted") == CAPACITY, events
    assert max(_queued(standin_events(server)[generating:])) == HEADROOM, events  # never more ahead


def test_requests_ahead_take_the_freed_slots(server, greedy) -> None:
    """CAPACITY + HEADROOM short requests at once: the HEADROOM ones are submitted ahead, take the
    slots the first ones free, and are answered like the others."""
    mark = len(standin_events(server))
    jobs = [in_background(server.infer, "tiny", request(LONG, 5)) for _ in range(CAPACITY + HEADROOM)]
    for thread, _ in jobs:
        thread.join()
    results = [box["result"] for _, box in jobs]
    assert [status for status, _ in results] == [200] * (CAPACITY + HEADROOM), [b.get("error") for _, b in results]
    assert {outputs(body)["text_output"]["data"][0] for _, body in results} == {LONG + greedy(LONG, 5)}
    events = wait_for(lambda: (lambda e: e if _counts(e, "finished") == CAPACITY + HEADROOM else None)(
        standin_events(server)[mark:]))
    assert _counts(events, "admitted") == CAPACITY + HEADROOM and _counts(events, "aborted") == 0, events


# --- cancellation -------------------------------------------------------------------------------
def _aborted(server: TritonServer, mark: int) -> list[tuple[int, int]]:
    found = []
    for e in standin_events(server)[mark:]:
        m = re.search(r"aborted after (\d+) of (\d+) tokens", e)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
    return found


def test_a_stop_request_cancels_the_request_with_its_id(server) -> None:
    mark = len(standin_events(server))
    thread, box = in_background(server.infer, "tiny", request(LONG, 300), request_id="job-7")
    wait_for(lambda: any("admitted" in e for e in standin_events(server)[mark:]))
    time.sleep(0.3)
    status, body = server.infer("tiny", request(LONG, 1, stop=True), request_id="job-7")
    assert status != 200 and body["error"] == "Request cancelled by client", (status, body)  # as upstream's
    thread.join(timeout=10)
    assert not thread.is_alive()
    status, body = box["result"]
    assert status != 200 and "cancelled" in body["error"].lower(), body
    (made, asked), = wait_for(lambda: _aborted(server, mark))
    assert asked == 300 and made < 150, (made, asked)  # generation stopped, long before its end
    status, body = server.infer("tiny", request(LONG, 1, stop=True))
    assert status == 400 and "id" in body["error"], body


def grpc_inputs(prompt: str, max_tokens: int, streaming: bool = False) -> list:
    import tritonclient.grpc as grpcclient

    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    tokens = grpcclient.InferInput("sampling_param_max_tokens", [1], "INT32")
    tokens.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
    out = [text, tokens]
    if streaming:
        flag = grpcclient.InferInput("streaming", [1], "BOOL")
        flag.set_data_from_numpy(np.array([True]))
        out.append(flag)
    return out


def test_a_client_cancellation_stops_the_generation(server) -> None:
    import tritonclient.grpc as grpcclient

    mark = len(standin_events(server))
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    answers: queue.Queue = queue.Queue()
    call = client.async_infer("tiny", grpc_inputs(LONG, 300), callback=lambda result, error: answers.put(error))
    wait_for(lambda: any("admitted" in e for e in standin_events(server)[mark:]))
    time.sleep(0.3)
    call.cancel()
    assert "cancel" in str(answers.get(timeout=10)).lower()
    (made, asked), = wait_for(lambda: _aborted(server, mark))
    assert asked == 300 and made < 150, (made, asked)
    client.close()
    status, _ = server.infer("tiny", request(LONG, 2))  # its slot is free again
    assert status == 200


# --- decoupled (serving.streaming) --------------------------------------------------------------
def test_streams_interleave_and_a_closed_stream_cancels(streaming, greedy) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{streaming.grpc}")
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    n, tokens = 4, 100
    for i in range(n):
        client.async_stream_infer("tiny", grpc_inputs(LONG, tokens, streaming=True), request_id=f"s{i}")
    chunks: dict[str, list[str]] = {f"s{i}": [] for i in range(n)}
    order = []
    whole = LONG + greedy(LONG, tokens)
    while any(not c or c[-1] != whole for c in chunks.values()):
        result, error = got.get(timeout=30)
        assert error is None, error
        rid = result.get_response().id
        chunks[rid].append(result.as_numpy("text_output")[0].decode())
        order.append(rid)
    for rid, parts in chunks.items():  # cumulative, as upstream streams: each text extends the one before
        assert len(parts) == tokens and all(b.startswith(a) for a, b in zip(parts, parts[1:])), rid
    first_final = min(len(order) - order[::-1].index(rid) - 1 for rid in chunks)
    assert all(order.index(rid) < first_final for rid in chunks), order  # all in flight before any ended
    # closing the stream with cancellation stops what is still generating
    mark = len(standin_events(streaming))
    client.async_stream_infer("tiny", grpc_inputs(LONG, 300, streaming=True), request_id="s-long")
    wait_for(lambda: any("admitted" in e for e in standin_events(streaming)[mark:]))
    time.sleep(0.3)
    client.stop_stream(cancel_requests=True)
    (made, asked), = wait_for(lambda: _aborted(streaming, mark))
    assert asked == 300 and made < 150, (made, asked)
    client.close()



# --- conformance with TensorRT-LLM's own LLM-API model (issue 22, item 3) ------------------------
# Upstream's model.py cannot be run here (it imports mpi4py, pandas and the real tensorrt_llm), so
# its behaviour is data read from its source (trtllm_llmapi.json `upstream_model`, with commits),
# and Kiln's model, serving the stand-in, is compared with that field by field.
UPSTREAM = json.loads(FACTS.read_text(encoding="utf-8"))["upstream_model"]


def test_model_py_takes_upstream_s_defaults() -> None:
    import ast

    source = (ROOT / "compiler" / "templates" / "triton" / "llmapi" / "model.py").read_text(encoding="utf-8")
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SAMPLING_DEFAULTS":
            found = ast.literal_eval(node.value)
    assert found == UPSTREAM["sampling_defaults"]


def test_answers_as_upstream_without_options(server, greedy) -> None:
    # a request that leaves exclude_input_from_output out gets the prompt echoed, as upstream's default
    status, body = server.infer("tiny", request(LONG, 6))
    assert status == 200, body
    assert UPSTREAM["sampling_defaults"]["exclude_input_from_output"] is False
    assert outputs(body)["text_output"]["data"] == [LONG + greedy(LONG, 6)]
    # optional outputs only when asked (upstream's output-config defaults are all false)
    assert set(outputs(body)) == {"text_output"}
    status, body = server.infer("tiny", request(LONG, 6, sampling_param_exclude_input_from_output=True))
    assert outputs(body)["text_output"]["data"] == [greedy(LONG, 6)]


def test_streams_cumulative_text_as_upstream(streaming, greedy) -> None:
    """Upstream's _create_response sends output.text (the text so far) in every streamed response."""
    import tritonclient.grpc as grpcclient

    assert UPSTREAM["streamed_text"] == "cumulative"
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{streaming.grpc}")
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    client.async_stream_infer("tiny", grpc_inputs(LONG, 8, streaming=True), request_id="c1",
                              enable_empty_final_response=True)
    texts = []
    try:
        while True:
            result, error = got.get(timeout=30)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                if result.get_response().outputs:
                    texts.append(result.as_numpy("text_output")[0].decode())
                break
            texts.append(result.as_numpy("text_output")[0].decode())
    finally:
        client.stop_stream()
        client.close()
    assert texts[-1] == LONG + greedy(LONG, 8)
    assert len(texts) == 8 and all(b.startswith(a) and len(b) > len(a) for a, b in zip(texts, texts[1:])), texts


def test_a_stop_request_is_answered_as_upstream(server) -> None:
    mark = len(standin_events(server))
    thread, box = in_background(server.infer, "tiny", request(LONG, 300), request_id="conf-1")
    wait_for(lambda: any("admitted" in e for e in standin_events(server)[mark:]))
    status, body = server.infer("tiny", request(LONG, 1, stop=True), request_id="conf-1")
    assert status != 200 and body["error"] == UPSTREAM["stop_request"]["message"], (status, body)
    thread.join(timeout=10)
    status, body = box["result"]
    assert status != 200 and body["error"] == UPSTREAM["cancelled_request"]["message"], body


def test_stream_text_delta_streams_what_each_response_adds(tmp_path, greedy) -> None:
    """serving.stream_text: delta (Kiln's earlier behaviour, now asked for): the pieces join to the
    whole text, the echoed prompt included."""
    import tritonclient.grpc as grpcclient

    server = serve(tmp_path, streaming=True, stream_text="delta")
    try:
        assert '"delta"' in (server.repository / "tiny" / "config.pbtxt").read_text(encoding="utf-8")
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
        got: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("tiny", grpc_inputs(LONG, 8, streaming=True), request_id="d1",
                                  enable_empty_final_response=True)
        pieces = []
        while True:
            result, error = got.get(timeout=30)
            assert error is None, error
            if result.get_response().outputs:
                pieces.append(result.as_numpy("text_output")[0].decode())
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
        client.close()
        assert "".join(pieces) == LONG + greedy(LONG, 8) and len(pieces) == 8, pieces
    finally:
        server.stop()
