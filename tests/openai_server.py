"""A real OpenAI-compatible chat server for tests: the standard library's HTTP server in front of a
causal language model that transformers loads from a directory (the quickstart's tiny model).

    python3 tests/openai_server.py --model examples/quickstart/model --port 8000 [--max-batch 64]

It does what a serving unit does to latency, at toy scale: one scheduler thread runs the model in
iterations; each iteration admits waiting requests (a prompt pass each, which yields their first
token) up to `--max-batch` running sequences, then advances every running sequence by one token.
So time to first token grows with the queue and the prefills ahead of a request, and time per
output token with the number of sequences sharing an iteration: an SLA on either has a concurrency
boundary, which is what `kiln tune` searches for.

Endpoints: POST /v1/chat/completions (streaming as server-sent events, or not), GET /v1/models,
GET /health. Greedy decoding; `max_completion_tokens` (or `max_tokens`) bounds the output and
`ignore_eos: true` makes it exact, as benchmarks ask of vLLM and trtllm-serve. It listens on the
address it is given (tests use 127.0.0.1 and a free port) and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_DONE = object()  # end of a request's token stream


@dataclass
class Request:
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool
    out: queue.Queue = field(default_factory=queue.Queue)  # token ids, then _DONE (or an Exception)
    produced: int = 0
    cache: object = None
    next_id: int | None = None


class Engine:
    """The model and its scheduler thread."""

    def __init__(self, model_dir: str, max_batch: int, threads: int, step_floor_s: float = 0.0) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos = self.tokenizer.eos_token_id
        self.max_batch = max_batch
        self.step_floor_s = step_floor_s
        self.waiting: queue.Queue[Request] = queue.Queue()
        self.running: list[Request] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self.thread.start()

    def submit(self, req: Request) -> None:
        self.waiting.put(req)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            if not self.running:
                try:
                    first = self.waiting.get(timeout=0.1)
                except queue.Empty:
                    continue
                self._admit(first)
            while len(self.running) < self.max_batch:
                try:
                    self._admit(self.waiting.get_nowait())
                except queue.Empty:
                    break
            for req in list(self.running):
                self._step(req)

    def _forward(self, ids: list[int], cache):
        torch = self.torch
        with torch.inference_mode():
            out = self.model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return int(out.logits[0, -1].argmax()), out.past_key_values

    def _admit(self, req: Request) -> None:
        try:
            req.next_id, req.cache = self._forward(req.prompt_ids, None)
        except Exception as e:  # a bad request must not stop the scheduler
            req.out.put(e)
            return
        self.running.append(req)
        self._emit(req)

    def _step(self, req: Request) -> None:
        if req in self.running:
            started = time.monotonic()
            req.next_id, req.cache = self._forward([req.next_id], req.cache)
            # a floor on one sequence's decode step, as a model too large for this CPU would have
            rest = self.step_floor_s - (time.monotonic() - started)
            if rest > 0:
                time.sleep(rest)
            self._emit(req)

    def _emit(self, req: Request) -> None:
        req.out.put(req.next_id)
        req.produced += 1
        if req.produced >= req.max_tokens or (req.next_id == self.eos and not req.ignore_eos):
            req.out.put(_DONE)
            req.cache = None
            self.running.remove(req)


def _prompt(body: dict) -> str:
    parts = []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def make_handler(engine: Engine, served_name: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # quiet: the test reads the results, not a log
            pass

        def _json(self, status: int, doc: dict) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": served_name, "object": "model",
                                                              "owned_by": "kiln-tests"}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
                ids = engine.tokenizer(_prompt(body))["input_ids"] or [engine.eos]
            except (ValueError, TypeError, AttributeError) as e:
                self._json(400, {"error": {"message": f"bad request: {e}"}})
                return
            req = Request(ids, max(1, max_tokens), bool(body.get("ignore_eos")))
            engine.submit(req)
            rid, created = "chatcmpl-" + uuid.uuid4().hex[:16], int(time.time())
            if body.get("stream"):
                self._stream(req, rid, created, body)
            else:
                self._whole(req, rid, created)

        def _tokens(self, req: Request):
            while True:
                item = req.out.get()
                if item is _DONE:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item

        def _whole(self, req: Request, rid: str, created: int) -> None:
            try:
                ids = list(self._tokens(req))
            except Exception as e:
                self._json(500, {"error": {"message": str(e)}})
                return
            self._json(200, {"id": rid, "object": "chat.completion", "created": created, "model": served_name,
                             "choices": [{"index": 0, "finish_reason": "length",
                                          "message": {"role": "assistant",
                                                      "content": engine.tokenizer.decode(ids)}}],
                             "usage": _usage(req)})

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(self, req: Request, rid: str, created: int, body: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def event(choice: dict, **extra) -> None:
                doc = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": served_name,
                       "choices": [choice], **extra}
                self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")

            try:
                first = True
                for tok in self._tokens(req):
                    delta = {"content": engine.tokenizer.decode([tok])}
                    if first:
                        delta["role"] = "assistant"
                        first = False
                    event({"index": 0, "delta": delta, "finish_reason": None})
                usage = {"usage": _usage(req)} if (body.get("stream_options") or {}).get("include_usage") else {}
                event({"index": 0, "delta": {}, "finish_reason": "length"}, **usage)
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def _usage(req: Request) -> dict:
    return {"prompt_tokens": len(req.prompt_ids), "completion_tokens": req.produced,
            "total_tokens": len(req.prompt_ids) + req.produced}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="directory with config.json, weights and tokenizer")
    p.add_argument("--served-name", default="tiny", help="the model name clients send")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-batch", type=int, default=64, help="most sequences running at once")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--step-floor-ms", type=float, default=0.0,
                   help="least time one sequence's decode step takes (sequences are decoded one after another)")
    args = p.parse_args()
    engine = Engine(args.model, args.max_batch, args.threads, args.step_floor_ms / 1000)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(engine, args.served_name))
    server.daemon_threads = True

    def stop(*_):
        engine.stopped.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"serving {args.model} as {args.served_name!r} on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
