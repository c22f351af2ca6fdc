"""A CPU stand-in for TensorRT-LLM's disaggregated serving (which needs GPUs): context and generation
servers on a causal language model that transformers loads (the quickstart's tiny model), and the
router in front, speaking the protocol of `trtllm-serve disaggregated`:

  router     POST /v1/completions: sends the request to a context server with max_tokens 1,
             stream off and disaggregated_params {request_type: context_only}; then to a generation
             server with the disaggregated_params the context server returned, request_type
             generation_only (tensorrt_llm/serve/openai_disagg_server.py). It reads the config Kiln
             writes (`trtllm-serve disaggregated --config_file`: hostname, port, context_servers /
             generation_servers {num_instances, urls, router}) and refuses what its parser refuses
             (a url count other than num_instances). GET /health.
  context    prefills the prompt, keeps its KV cache under a ctx_request_id and answers the first
             token with disaggregated_params {ctx_request_id, first_gen_tokens, opaque_state: where
             the KV cache is fetched}; refuses a prompt longer than its options file's
             cache_transceiver_config.max_tokens_in_buffer (the transfer buffer).
  generation fetches that KV cache from the context server (the stand-in's transfer: HTTP instead of
             UCX or NIXL) and decodes from first_gen_tokens; a request without disaggregated_params
             is served whole (the aggregated reference).

Each server reads its role's LLM-API options file (the one Kiln writes) and answers GET /stats with
the request types it served, and GET /health and /v1/models (trtllm-serve's readiness paths).
Prompts are token-id lists or text (tokenized with the checkpoint's tokenizer); decoding is
greedy; `stream: true` answers server-sent events, one token each, which the router relays from
the generation server as they come (openai_disagg_server.py streams the generation response).

KV-cache events and the KV-aware router: a server buffers a `stored` event with the hashes of the
full blocks of each prompt it holds, at most kv_cache_config.event_buffer_max_size of them and
none when that is 0 (TensorRT-LLM's default) or block reuse is off, and hands them out on POST
/kv_cache_events. A `kv_cache_aware` router is a port of tensorrt_llm/serve/router.py
KvCacheAwareRouter (stored copy, commit not recorded): `_tokenize` takes token ids as they are and
tokenizes text with AutoTokenizer.from_pretrained(request's model), a name resolved against its
working directory before the Hub; `get_next_server` hashes the tokens but the last in blocks of
router.tokens_per_block, chained to the previous block's hash, and picks the server with the
highest matched / padded tokens - active requests / router.max_batch_size (default 64);
`finish_request` polls the chosen server's events (KvCacheAwareServerState.poll_events,
update_with_events); matched tokens count whole leading blocks found. GET /stats on the router
gives the matches of each request it routed.

    python3 tests/disagg_standin.py server --role context --model DIR --options FILE --port P
    python3 tests/disagg_standin.py router --config disagg-config.yaml
    python3 tests/disagg_standin.py trtllm-serve ARGV...   # the container command Kiln emits

The last form takes the argv of the `trtllm-serve` commands Kiln writes for a server or the router
(checked against the pinned flag tables, compiler/runtimes/data/trtllm_serve.json and
trtllm_disaggregated.json) and serves on 127.0.0.1 (the tests bind loopback only; 0.0.0.0 is
taken as loopback).
"""

from __future__ import annotations

import argparse
import collections
import io
import itertools
import json
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml


class Model:
    def __init__(self, model_dir: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.lock = threading.Lock()

    def ids(self, prompt) -> list[int]:
        return list(prompt) if isinstance(prompt, list) else self.tokenizer(prompt)["input_ids"]

    def step(self, ids: list[int], cache=None):
        with self.lock, self.torch.no_grad():
            out = self.model(self.torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return int(out.logits[0, -1].argmax()), out.past_key_values

    def decode(self, first: int, cache, count: int) -> list[int]:
        return list(self.generate(first, cache, count))

    def generate(self, first: int, cache, count: int):
        """The tokens from `first` on, one at a time as each is decoded."""
        last = first
        yield first
        for _ in range(count - 1):
            last, cache = self.step([last], cache)
            yield last

    def dumps(self, cache) -> bytes:
        buf = io.BytesIO()
        self.torch.save(cache, buf)
        return buf.getvalue()

    def loads(self, data: bytes):
        return self.torch.load(io.BytesIO(data), weights_only=False)


def block_hashes(tokens: list[int], block: int, full_only: bool = False) -> list[int]:
    """The router's block keys (router.py get_next_server: the last token is not in a block key,
    each block's key chained to the previous one); a server stores only full blocks."""
    out: list[int] = []
    for t in range(0, len(tokens) - 1, block):
        end = min(t + block, len(tokens) - 1)
        if full_only and end - t < block:
            break
        out.append(hash((tuple(tokens[t:end]), out[-1] if out else 0)))
    return out


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Handler(BaseHTTPRequestHandler):
    routes: dict = {}

    def log_message(self, *args) -> None:  # quiet
        pass

    def _answer(self, code: int, body) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        for prefix, fn in self.routes.get("GET", {}).items():
            if self.path == prefix or (prefix.endswith("/") and self.path.startswith(prefix)):
                return self._answer(*fn(self.path))
        self._answer(404, {"error": self.path})

    def do_POST(self) -> None:
        fn = self.routes.get("POST", {}).get(self.path)
        if fn is None:
            return self._answer(404, {"error": self.path})
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        code, answer = fn(body)
        if isinstance(answer, (dict, list, bytes)):
            return self._answer(code, answer)
        # a stream of server-sent events, written as each comes; the closed connection ends it
        self.send_response(code)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in answer:
            self.wfile.write(event)
            self.wfile.flush()


def sse(chunk) -> bytes:
    return b"data: " + (chunk if isinstance(chunk, bytes) else json.dumps(chunk).encode()) + b"\n\n"


def serve_role(role: str, model_dir: str, options_file: str, port: int) -> None:
    """role: context or generation (the request types it takes), or any (trtllm-serve's servers
    take both; the router decides)."""
    options = yaml.safe_load(open(options_file, encoding="utf-8"))
    buffer = options["cache_transceiver_config"]["max_tokens_in_buffer"]
    kv_config = options.get("kv_cache_config") or {}
    block = kv_config.get("tokens_per_block", 32)
    reuse = kv_config.get("enable_block_reuse", True)
    events = collections.deque(maxlen=kv_config.get("event_buffer_max_size", 0) or None) \
        if kv_config.get("event_buffer_max_size", 0) > 0 and reuse else None
    event_ids = itertools.count(1)
    model = Model(model_dir)
    kept: dict[str, object] = {}
    ids = itertools.count(1)
    stats = {"context_only": 0, "generation_only": 0, "whole": 0}

    def stored(tokens: list[int]) -> None:
        hashes = block_hashes(tokens, block, full_only=True)
        if events is not None and hashes:
            events.append({"id": next(event_ids), "data": {"type": "stored",
                                                          "blocks": [{"block_hash": h} for h in hashes]}})

    def answer(body: dict, tokens):
        # openai_protocol.py CompletionResponse / CompletionStreamResponse: object "text_completion"
        head = {"id": f"cmpl-{next(ids)}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model", model_dir)}
        if not body.get("stream"):
            out = list(tokens)
            return 200, {**head, "choices": [{"index": 0, "token_ids": out, "text": model.tokenizer.decode(out),
                                              "finish_reason": "length"}]}

        def events_():
            for t in tokens:
                yield sse({**head, "choices": [{"index": 0, "token_ids": [t], "text": model.tokenizer.decode([t]),
                                                "finish_reason": None}]})
            yield sse(b"[DONE]")
        return 200, events_()

    def completions(body: dict):
        prompt, params = model.ids(body["prompt"]), body.get("disaggregated_params")
        kind = params["request_type"] if params else "whole"
        if role == "context" and kind != "context_only" or role == "generation" and kind == "context_only":
            return 400, {"error": f"a {role} server does not take {kind} requests"}
        stats[kind] += 1
        if kind == "generation_only":
            with urllib.request.urlopen(params["opaque_state"] + params["ctx_request_id"], timeout=60) as r:
                cache = model.loads(r.read())
            stored(prompt)  # the received blocks are this server's now
            return answer(body, model.generate(params["first_gen_tokens"][0], cache, body["max_tokens"]))
        if kind == "context_only" and len(prompt) > buffer:
            return 400, {"error": f"prompt of {len(prompt)} tokens exceeds max_tokens_in_buffer {buffer}"}
        first, cache = model.step(prompt)
        stored(prompt)
        if kind == "whole":
            return answer(body, model.generate(first, cache, body["max_tokens"]))
        rid = str(next(ids))
        kept[rid] = model.dumps(cache)
        return 200, {"choices": [{"token_ids": [first], "finish_reason": "length", "disaggregated_params": {
            "request_type": "context_only", "ctx_request_id": rid, "first_gen_tokens": [first],
            "opaque_state": f"http://127.0.0.1:{port}/kv/"}}]}

    def kv(path: str):
        data = kept.pop(path.rsplit("/", 1)[-1], None)
        return (200, data) if data is not None else (404, {"error": "no such KV cache"})

    def kv_events(_body: dict):
        out = list(events or ())
        if events is not None:
            events.clear()
        return 200, out

    Handler.routes = {"POST": {"/v1/completions": completions, "/kv_cache_events": kv_events},
                      "GET": {"/health": lambda p: (200, {}), "/v1/models": lambda p: (200, {"data": [
                          {"id": model_dir, "object": "model"}]}),
                              "/stats": lambda p: (200, stats), "/kv/": kv}}
    _run(port)


class RoundRobin:
    def __init__(self, urls: list[str], args: dict) -> None:
        self.cycle = itertools.cycle(urls)

    def pick(self, body: dict) -> tuple[str, list[int]]:
        return next(self.cycle), []

    def finish(self, server: str) -> None:
        pass


class KvCacheAware:
    """router.py KvCacheAwareRouter (see the module's docstring)."""

    def __init__(self, urls: list[str], args: dict) -> None:
        self.urls = urls
        self.block = args.get("tokens_per_block", 32)
        self.max_batch = args.get("max_batch_size", 64)
        self.tables: dict[str, set[int]] = {u: set() for u in urls}
        self.active = {u: 0 for u in urls}
        self.tokenizers: dict[str, object] = {}
        self.lock = threading.Lock()

    def tokenize(self, body: dict) -> list[int]:
        prompt = body["prompt"]
        if isinstance(prompt, list):
            return prompt
        model = body["model"]
        if model not in self.tokenizers:  # a relative name: a directory here, else a Hub id
            from transformers import AutoTokenizer

            self.tokenizers[model] = AutoTokenizer.from_pretrained(model)
        return self.tokenizers[model](prompt)["input_ids"]

    def pick(self, body: dict) -> tuple[str, int]:
        hashes = block_hashes(self.tokenize(body), self.block)
        padded = len(hashes) * self.block
        with self.lock:
            scores, matches = [], []
            for u in self.urls:
                matched = 0
                for h in hashes:
                    if h not in self.tables[u]:
                        break
                    matched += self.block
                matches.append(matched)
                scores.append((matched / padded if padded else 0.0) - self.active[u] / self.max_batch)
            i = scores.index(max(scores))
            self.active[self.urls[i]] += 1
        return self.urls[i], matches[i]

    def finish(self, server: str) -> None:
        _, events = _post(f"http://{server}/kv_cache_events", {})
        with self.lock:
            self.active[server] -= 1
            for raw in events:
                event = raw.get("data", raw)
                if event["type"] == "stored":
                    self.tables[server].update(b["block_hash"] for b in event["blocks"])
                elif event["type"] == "removed":
                    self.tables[server].difference_update(event["block_hashes"])


ROUTERS = {"round_robin": RoundRobin, "kv_cache_aware": KvCacheAware}


def serve_router(config_file: str) -> None:
    config = yaml.safe_load(open(config_file, encoding="utf-8"))
    routers = {}
    for section in ("context_servers", "generation_servers"):
        servers = config[section]
        if len(servers["urls"]) != servers["num_instances"]:
            raise SystemExit(f"{section}: {len(servers['urls'])} urls for num_instances {servers['num_instances']}")
        args = dict(servers.get("router") or {})
        kind = args.pop("type", "round_robin")
        if kind not in ROUTERS:
            raise SystemExit(f"{section}: router type {kind!r} is not one of {', '.join(ROUTERS)}")
        routers[section] = ROUTERS[kind](servers["urls"], args)
    matches: list[dict] = []

    def completions(body: dict):
        ctx_router, gen_router = routers["context_servers"], routers["generation_servers"]
        ctx_server, ctx_match = ctx_router.pick(body)
        ctx = dict(body, max_tokens=1, stream=False, disaggregated_params={"request_type": "context_only"})
        try:
            code, answer = _post(f"http://{ctx_server}/v1/completions", ctx)
        finally:
            ctx_router.finish(ctx_server)
        if code != 200:
            return code, answer
        params = dict(answer["choices"][0]["disaggregated_params"], request_type="generation_only")
        gen_server, gen_match = gen_router.pick(body)
        matches.append({"context": ctx_match, "generation": gen_match})
        gen = dict(body, disaggregated_params=params)
        if not body.get("stream"):
            try:
                return _post(f"http://{gen_server}/v1/completions", gen)
            finally:
                gen_router.finish(gen_server)

        def relay():
            req = urllib.request.Request(f"http://{gen_server}/v1/completions", json.dumps(gen).encode(),
                                         {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    for line in resp:
                        if line.strip():
                            yield line + b"\n"
            finally:
                gen_router.finish(gen_server)
        return 200, relay()

    Handler.routes = {"POST": {"/v1/completions": completions},
                      "GET": {"/health": lambda p: (200, {}), "/stats": lambda p: (200, matches)}}
    _run(config["port"], config["hostname"])


def trtllm_serve(argv: list[str]) -> None:
    """The `trtllm-serve` command lines Kiln writes: a server on a checkpoint with its options
    file, or `disaggregated --config_file` (the router)."""
    from compiler.runtimes import ROUTER, check_argv, check_command

    command = ["trtllm-serve", *argv]
    router = argv[:1] == ["disaggregated"]
    problems = check_argv(ROUTER.data, command) if router else check_command("trtllm-serve", command)
    if problems:
        raise SystemExit("trtllm-serve: " + "; ".join(problems))

    def value(flag: str) -> str:
        return command[command.index(flag) + 1]

    if router:
        serve_router(value("--config_file"))
    else:
        serve_role("any", argv[0], value("--extra_llm_api_options"), int(value("--port")))


def _run(port: int, host: str = "127.0.0.1") -> None:
    host = "127.0.0.1" if host == "0.0.0.0" else host  # the tests bind loopback only
    server = ThreadingHTTPServer((host, port), Handler)
    signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def main() -> None:
    if sys.argv[1:2] == ["trtllm-serve"]:
        return trtllm_serve(sys.argv[2:])
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("server")
    s.add_argument("--role", choices=["context", "generation"], required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--options", required=True)
    s.add_argument("--port", type=int, required=True)
    r = sub.add_parser("router")
    r.add_argument("--config", required=True)
    a = ap.parse_args()
    if a.what == "server":
        serve_role(a.role, a.model, a.options, a.port)
    else:
        serve_router(a.config)


if __name__ == "__main__":
    main()
