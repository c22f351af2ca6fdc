"""HTTP servers on 127.0.0.1 that answer the registry client as a hostile or broken registry would,
and a relay that puts a real registry behind such behaviour (a stripped header, writes held back
so that two publishes interleave in a chosen order).

A server is a real socket and a real HTTP exchange; only what it answers is chosen by the test.
Every loop is bounded: a dripping answer stops when the server stops or after `DRIP_LIMIT_S`.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

DRIP_LIMIT_S = 120.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    drip_s: float | None = None  # send the answer a byte at a time, this many seconds apart
    drip_head: bool = True  # the status line and headers too (else they go at once, then the body drips)
    repeat: int = 1  # the body is sent this many times (a large answer without holding it in memory)


class Server:
    """A threaded HTTP server on 127.0.0.1 whose answers come from `answer(request)`; every request
    is recorded (method, path, headers, body)."""

    def __init__(self, answer: Callable[[Request], Answer]) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self.stopping = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = self.headers.get("Content-Length")
                try:
                    body = self.rfile.read(int(length)) if length else b""
                except ValueError:
                    body = b""
                req = Request(self.command, self.path, dict(self.headers.items()), body)
                outer.requests.append(req)
                outer._send(self, outer.answer(req))

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def _send(self, handler: http.server.BaseHTTPRequestHandler, a: Answer) -> None:
        reason = http.client.responses.get(a.status, "Whatever")
        head = f"HTTP/1.1 {a.status} {reason}\r\n".encode("latin-1")
        for name, value in a.headers:
            head += f"{name}: {value}\r\n".encode("latin-1", "replace")
        head += b"Connection: close\r\n\r\n"
        send_body = handler.command != "HEAD"
        handler.close_connection = True
        try:
            if a.drip_s is not None:
                data = head + (a.body if send_body else b"")
                if not a.drip_head:
                    handler.wfile.write(head)
                    handler.wfile.flush()
                    data = data[len(head):]
                until = time.monotonic() + DRIP_LIMIT_S
                for i in range(len(data)):
                    if self.stopping.is_set() or time.monotonic() > until:
                        return
                    handler.wfile.write(data[i:i + 1])
                    handler.wfile.flush()
                    self.stopping.wait(a.drip_s)
                return
            handler.wfile.write(head)
            if send_body:
                for _ in range(a.repeat):
                    if self.stopping.is_set():
                        return
                    handler.wfile.write(a.body)
        except OSError:  # the client hung up (as it should on a refused answer)
            pass

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def forward(upstream: str, req: Request, self_host: str) -> Answer:
    """`req` sent on to the registry at `upstream` (host:port); its answer, with the Location of an
    upload pointed back at the relay."""
    conn = http.client.HTTPConnection(upstream, timeout=60)
    try:
        headers = {k: v for k, v in req.headers.items() if k.lower() not in ("host", "connection")}
        conn.request(req.method, req.path, body=req.body if req.method in ("PUT", "POST", "PATCH") else None,
                     headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        out = [(k, v.replace(upstream, self_host)) for k, v in resp.getheaders()
               if k.lower() not in ("connection", "transfer-encoding", "content-length")]
        if req.method != "HEAD":
            out.append(("Content-Length", str(len(body))))
        elif resp.getheader("Content-Length"):
            out.append(("Content-Length", resp.getheader("Content-Length")))
        return Answer(resp.status, out, body)
    finally:
        conn.close()


class Relay(Server):
    """A real registry behind a relay. `edit(request, answer)` may change an answer; PUTs whose
    path ends with one of `hold` wait (at most `hold_s`) until `hold_count` of them have arrived,
    and are then forwarded one after another in the order they arrived, each answered only after
    all were forwarded: two publishes' tag writes both happen after both checked the tag."""

    def __init__(self, upstream: str, edit: Callable[[Request, Answer], Answer] | None = None,
                 hold: tuple[str, ...] = (), hold_count: int = 2, hold_s: float = 60.0) -> None:
        self.upstream, self.edit = upstream, edit
        self.hold, self.hold_count, self.hold_s = hold, hold_count, hold_s
        self._held: list[tuple[Request, threading.Event, list]] = []
        self._lock = threading.Lock()
        self.forwarded_order: list[bytes] = []
        super().__init__(self._relay)

    def _relay(self, req: Request) -> Answer:
        if req.method == "PUT" and self.hold and req.path.split("?")[0].endswith(self.hold):
            return self._held_put(req)
        answer = forward(self.upstream, req, self.host)
        return self.edit(req, answer) if self.edit else answer

    def _held_put(self, req: Request) -> Answer:
        done, slot = threading.Event(), []
        with self._lock:
            self._held.append((req, done, slot))
            if len(self._held) >= self.hold_count:
                for r, ev, out in self._held:
                    out.append(forward(self.upstream, r, self.host))
                    self.forwarded_order.append(r.body)
                for _, ev, _ in self._held:
                    ev.set()
                self._held.clear()
        if not done.wait(self.hold_s):  # the other publish never came: forward this one alone
            with self._lock:
                if not slot:
                    self._held = [h for h in self._held if h[1] is not done]
                    slot.append(forward(self.upstream, req, self.host))
                    self.forwarded_order.append(req.body)
        return slot[0]
