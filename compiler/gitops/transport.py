"""HTTP for the registry client (compiler/gitops/oci.py): urllib, with a deadline that holds during
a transfer and a redirect policy that keeps credentials at their origin.

- A request's deadline (time.monotonic()) shrinks every socket timeout to what is left of it, and a
  timer shuts the request's sockets down when it passes: a registry that drips a byte every few
  seconds never trips a per-read timeout, and one read lasts as long as its sender likes.
- Redirects: of GET and HEAD only, to http(s) URLs only, at most MAX_REDIRECTS, their bodies not
  read; the Authorization header does not follow one to another origin (scheme, host, port), as
  Docker drops it (urllib keeps it).
- No file:, ftp: or data: handler is installed: a Location can only name an http(s) URL.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
import urllib.request

MAX_REDIRECTS = 5
# what a broken answer makes the standard library raise (a chunk size past any integer: OverflowError)
WIRE_ERRORS = (OSError, http.client.HTTPException, ValueError, OverflowError)


class RedirectRefused(Exception):
    """A redirect that is not followed (the client turns it into its own error)."""


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL; None when it is not an http(s) URL."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


class Guard:
    """The deadline of one request. Per-read socket timeouts shrink to what is left of it, and a
    timer shuts the request's sockets down when it passes: a registry that drips a byte every few
    seconds never trips a per-read timeout, and one read can last as long as its sender likes."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.expired = False
        self.sockets: list[socket.socket] = []  # the connections' own sockets (TLS ones for https)
        self._dups: list[socket.socket] = []  # duplicates of the raw sockets, to shut them down
        self._lock = threading.Lock()
        self._timer = None
        if deadline is not None:
            self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
            self._timer.daemon = True
            self._timer.start()

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def create_connection(self, *args, **kwargs) -> socket.socket:
        sock = socket.create_connection(*args, **kwargs)
        with self._lock:
            # a duplicate survives TLS wrapping (which detaches the original object); shutting it
            # down ends every blocked read on the connection
            dup = sock.dup()
            self._dups.append(dup)
            if self.expired:
                _shutdown(dup)
        return sock

    def shrink(self, timeout: float) -> None:
        left = self.left()
        if left is None:
            return
        for sock in self.sockets:
            try:
                sock.settimeout(max(0.01, min(timeout, left)))
            except OSError:
                pass

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            for dup in self._dups:
                _shutdown(dup)

    def done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            for dup in self._dups:
                dup.close()
            self._dups.clear()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _connection_class(base: type, guard: Guard) -> type:
    class Connection(base):
        def connect(self) -> None:
            self._create_connection = guard.create_connection
            super().connect()
            guard.sockets.append(self.sock)

    return Connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard

    def http_open(self, req):
        return self.do_open(_connection_class(http.client.HTTPConnection, self.guard), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard

    def https_open(self, req):
        return self.do_open(_connection_class(http.client.HTTPSConnection, self.guard), req, context=self._context)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects of GET and HEAD only, to http(s) URLs only, at most MAX_REDIRECTS of them, and
    without the Authorization header once they leave `origin` (urllib would keep it: a registry's
    blob store is another origin). The body of a redirect is not read (urllib reads all of it)."""

    def __init__(self, origin) -> None:
        self.origin = origin

    def http_error_302(self, req, fp, code, msg, headers):
        location = headers.get("Location")
        if not location or req.get_method() not in ("GET", "HEAD"):
            return None  # the error handler reports the status
        newurl = urllib.parse.urljoin(req.full_url, location)
        if origin(newurl) is None:
            raise RedirectRefused(f"{req.get_method()} {req.full_url}: redirected to {newurl!r}, which is not an "
                                "http(s) URL")
        hops = getattr(req, "kiln_hops", 0) + 1
        if hops > MAX_REDIRECTS:
            raise RedirectRefused(f"{req.get_method()} {req.full_url}: more than {MAX_REDIRECTS} redirects")
        new = self.redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        new.kiln_hops = hops
        if origin(new.full_url) != self.origin:
            for name in list(new.headers):
                if name.lower() == "authorization":
                    del new.headers[name]
        fp.close()
        return self.parent.open(new, timeout=req.timeout)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class Response:
    """A response being read, under its request's deadline."""

    def __init__(self, raw, guard: Guard) -> None:
        self.raw, self.guard = raw, guard
        self.status = raw.status
        self.headers = raw.headers

    def close(self) -> None:
        try:
            self.raw.close()
        except WIRE_ERRORS:
            pass
        self.guard.done()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def send(req: urllib.request.Request, guard: Guard, credential_origin, timeout: float):
    """urlopen through handlers that know `guard`'s deadline and keep the Authorization header at
    `credential_origin`."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(), _HTTPHandler(guard),
                    _HTTPSHandler(guard), urllib.request.HTTPDefaultErrorHandler(), _Redirects(credential_origin),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener.open(req, timeout=timeout)
