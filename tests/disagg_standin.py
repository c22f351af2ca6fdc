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
the request types it served. Prompts are token-id lists; decoding is greedy.

    python3 tests/disagg_standin.py server --role context --model DIR --options FILE --port P
    python3 tests/disagg_standin.py router --config disagg-config.yaml
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import signal
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml


class Model:
    def __init__(self, model_dir: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.lock = threading.Lock()

    def step(self, ids: list[int], cache=None):
        with self.lock, self.torch.no_grad():
            out = self.model(self.torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return int(out.logits[0, -1].argmax()), out.past_key_values

    def decode(self, first: int, cache, count: int) -> list[int]:
        tokens = [first]
        while len(tokens) < count:
            nxt, cache = self.step([tokens[-1]], cache)
            tokens.append(nxt)
        return tokens

    def dumps(self, cache) -> bytes:
        buf = io.BytesIO()
        self.torch.save(cache, buf)
        return buf.getvalue()

    def loads(self, data: bytes):
        return self.torch.load(io.BytesIO(data), weights_only=False)


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
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(*fn(body))


def serve_role(role: str, model_dir: str, options_file: str, port: int) -> None:
    options = yaml.safe_load(open(options_file, encoding="utf-8"))
    buffer = options["cache_transceiver_config"]["max_tokens_in_buffer"]
    model = Model(model_dir)
    kept: dict[str, object] = {}
    ids = itertools.count(1)
    stats = {"context_only": 0, "generation_only": 0, "whole": 0}

    def completions(body: dict):
        prompt, params = body["prompt"], body.get("disaggregated_params")
        kind = params["request_type"] if params else "whole"
        if role == "context" and kind != "context_only" or role == "generation" and kind == "context_only":
            return 400, {"error": f"a {role} server does not take {kind} requests"}
        stats[kind] += 1
        if kind == "generation_only":
            with urllib.request.urlopen(params["opaque_state"] + params["ctx_request_id"], timeout=60) as r:
                cache = model.loads(r.read())
            tokens = model.decode(params["first_gen_tokens"][0], cache, body["max_tokens"])
            return 200, {"choices": [{"token_ids": tokens, "finish_reason": "length"}]}
        if kind == "context_only" and len(prompt) > buffer:
            return 400, {"error": f"prompt of {len(prompt)} tokens exceeds max_tokens_in_buffer {buffer}"}
        first, cache = model.step(prompt)
        if kind == "whole":
            return 200, {"choices": [{"token_ids": model.decode(first, cache, body["max_tokens"]),
                                      "finish_reason": "length"}]}
        rid = str(next(ids))
        kept[rid] = model.dumps(cache)
        return 200, {"choices": [{"token_ids": [first], "finish_reason": "length", "disaggregated_params": {
            "request_type": "context_only", "ctx_request_id": rid, "first_gen_tokens": [first],
            "opaque_state": f"http://127.0.0.1:{port}/kv/"}}]}

    def kv(path: str):
        data = kept.pop(path.rsplit("/", 1)[-1], None)
        return (200, data) if data is not None else (404, {"error": "no such KV cache"})

    Handler.routes = {"POST": {"/v1/completions": completions},
                      "GET": {"/health": lambda p: (200, {}), "/stats": lambda p: (200, stats), "/kv/": kv}}
    _run(port)


def serve_router(config_file: str) -> None:
    config = yaml.safe_load(open(config_file, encoding="utf-8"))
    pools = {}
    for section in ("context_servers", "generation_servers"):
        servers = config[section]
        if len(servers["urls"]) != servers["num_instances"]:
            raise SystemExit(f"{section}: {len(servers['urls'])} urls for num_instances {servers['num_instances']}")
        pools[section] = itertools.cycle(servers["urls"])

    def completions(body: dict):
        ctx = dict(body, max_tokens=1, stream=False, disaggregated_params={"request_type": "context_only"})
        code, answer = _post(f"http://{next(pools['context_servers'])}/v1/completions", ctx)
        if code != 200:
            return code, answer
        params = dict(answer["choices"][0]["disaggregated_params"], request_type="generation_only")
        return _post(f"http://{next(pools['generation_servers'])}/v1/completions",
                     dict(body, disaggregated_params=params))

    Handler.routes = {"POST": {"/v1/completions": completions}, "GET": {"/health": lambda p: (200, {})}}
    _run(config["port"], config["hostname"])


def _run(port: int, host: str = "127.0.0.1") -> None:
    server = ThreadingHTTPServer((host, port), Handler)
    signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def main() -> None:
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
