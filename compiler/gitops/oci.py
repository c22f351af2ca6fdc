"""A small client for the OCI distribution API (blobs, manifests, tags), on the standard library.

Enough for ORAS-style artifacts: monolithic blob uploads, manifests by tag or digest, and the
token handshake registries use (anonymous or with $KILN_REGISTRY_USERNAME/$KILN_REGISTRY_PASSWORD).
Loopback registries are spoken to over plain HTTP (as Docker does), everything else over HTTPS
unless $KILN_REGISTRY_PLAIN_HTTP=1.

Nothing a registry sends is trusted: every read is bounded (a blob by its descriptor's size, a
manifest by the 4 MiB registries allow, a token answer or error body by a small maximum), JSON is
parsed into a clear error when it is not an object or nests too deep, and text the registry wrote
is shown with control characters escaped. Credentials (a Basic header or a bearer token) go only
to the registry's origin (scheme, host, port) and to the token service it names: a redirect to
another origin (a blob store, say) is followed without them, as Docker does. A client may carry a
deadline (the cache's time budget): it holds during a transfer, not only between requests, so a
registry that drips a byte at a time cannot keep a build waiting past it. The HTTP underneath
(deadline, redirect policy) is compiler/gitops/transport.py; masking secrets and escaping a
registry's text, compiler/gitops/redaction.py.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from compiler.boundedjson import BoundedJSONError, loads_bounded

from .redaction import printable, redact, remember_secret
from .transport import MAX_REDIRECTS, WIRE_ERRORS, Guard, RedirectRefused, Response, origin, send

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MAX_MANIFEST = 4 << 20  # the limit registries put on manifests (distribution: 4 MiB)
MAX_JSON = 1 << 20  # a token answer (a JWT of a few KB)
MAX_ERROR_BODY = 8 << 10  # an error body: only its message is shown
CHUNK = 1 << 16
TIMEOUT_S = 60  # per socket operation: a blob upload of a checkpoint must not be cut short
# Waits before each retry of a manifest write refused as MANIFEST_BLOB_UNKNOWN for a blob this
# client has just uploaded. Seen with Distribution 2.8 (filesystem storage) when two publishes push
# the same blob at once: for a moment the repository's link to the blob reads as absent, and a
# manifest checked then is refused although the blob is there a moment later (2 of 20 concurrent
# publishes here). A blob that is really missing still fails, after these few seconds.
BLOB_UNKNOWN_RETRY_S = (0.25, 0.5, 1.0, 2.0)
# Waits before each retry of a request the registry failed (5xx) that is safe to repeat: a read
# (GET, HEAD) or a manifest write (PUT of the same bytes to the same reference). The same race in
# Distribution 2.8 answers a HEAD or GET of that blob with HTTP 500 for a moment.
SERVER_ERROR_RETRY_S = (0.25, 0.5, 1.0)
# Waits before each look for a blob whose upload the registry failed (5xx): Distribution 2.8 fails
# the later of two simultaneous uploads of one blob with HTTP 500 (seen here with the empty config
# blob of two concurrent publishes); the blob is then there, which is all the upload was for. An
# upload itself is not repeated: its session is spent.
BLOB_FAILED_LOOK_S = (0.0, 0.25, 0.5, 1.0)
# The longest Retry-After (RFC 9110 section 10.2.3: seconds, or an HTTP date) a retry waits for;
# a registry that asks for more is left for the build (RegistryBusy), not waited on per request.
MAX_RETRY_AFTER_S = 60.0
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_REPO_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_HOST_RE = re.compile(r"[A-Za-z0-9.-]+(?::\d{1,5})?|\[[0-9A-Fa-f:.]+\](?::\d{1,5})?")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_TOKEN_RE = re.compile(r"[\x21-\x7e]{1,65536}")  # what an Authorization header can carry
__all__ = ["Client", "Registry", "RegistryError", "RegistryUnreachable", "RegistryDeadline", "RegistryConflict",
           "RegistryBlobUnknown", "RegistryBusy", "RegistryServerError", "json_object", "printable", "redact", "OCI_MANIFEST", "OCI_INDEX",
           "MAX_MANIFEST", "MAX_JSON"]


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delay-seconds or an HTTP date; RFC 9110 10.2.3), or
    None when it is absent or neither."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit() and len(value) <= 12:
        return float(value)
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class RegistryError(Exception):
    """The registry refused a request, answered what is no answer, or could not be reached (one
    line, no traceback, no credentials, no control characters)."""

    def __init__(self, message: str) -> None:
        super().__init__(printable(redact(message), 2000))


class RegistryUnreachable(RegistryError):
    """No answer: the connection failed or a request timed out. A cache gives up on such a registry
    for the rest of a build (compiler/gitops/cache.py)."""


class RegistryDeadline(RegistryUnreachable):
    """The client's deadline passed (during a request or before one)."""


class RegistryConflict(RegistryError):
    """A conditional write was refused (HTTP 412): the tag changed since it was read."""


class RegistryServerError(RegistryError):
    """The registry answered 5xx (or 429): it failed or is busy, the request may not have been
    wrong. `retry_after`: the seconds its Retry-After header asked for (None: it named none)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RegistryBusy(RegistryUnreachable):
    """The registry asked to be retried later than Kiln waits (Retry-After past MAX_RETRY_AFTER_S):
    a cache gives up on it for the build, as on one that does not answer."""


class RegistryBlobUnknown(RegistryError):
    """A manifest write was refused because the registry does not (yet) see a blob it names
    (HTTP 400 MANIFEST_BLOB_UNKNOWN)."""


@dataclass(frozen=True)
class Registry:
    host: str  # "127.0.0.1:5000", "ghcr.io"
    namespace: str  # "" or "team/inference"
    scheme: str = "https"
    # (user, password) from a `user:password@host` reference; never printed (repr=False, __str__)
    credentials: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    @staticmethod
    def parse(target: str) -> "Registry":
        """'[user:password@]host[:port][/namespace]' as in the spec's publish.registry. Credentials in
        the reference take the place of $KILN_REGISTRY_USERNAME/PASSWORD; no message shows them.
        The password may hold any character ('/', '@' and quotes among them): everything before
        the last '@' is the user information, since neither a host nor a namespace has an '@'."""
        text = target.strip().removeprefix("oci://").rstrip("/")
        credentials, shown = None, text
        if "@" in text:
            userinfo, _, text = text.rpartition("@")
            user, sep, password = userinfo.partition(":")
            if password:  # also masked wherever a message might carry it (a user name alone is no secret)
                for secret in (userinfo, password, urllib.parse.unquote(password)):
                    remember_secret(secret)
            shown = "***@" + text
            if not sep or not user:
                raise RegistryError(f"not a registry reference: {shown!r} (give credentials as a user name, ':' "
                                    "and a password before '@')")
            credentials = (urllib.parse.unquote(user), urllib.parse.unquote(password))
        host, _, namespace = text.partition("/")
        if not host or not _HOST_RE.fullmatch(host) or (namespace and not _REPO_RE.fullmatch(namespace)):
            raise RegistryError(f"not a registry reference: {shown!r} (expected host[:port][/namespace])")
        plain = os.environ.get("KILN_REGISTRY_PLAIN_HTTP") == "1" or host.rsplit(":", 1)[0] in _LOOPBACK \
            or host.startswith("[::1]")
        return Registry(host, namespace, "http" if plain else "https", credentials)

    def repo(self, name: str) -> str:
        return f"{self.namespace}/{name}" if self.namespace else name

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}" if self.namespace else self.host


def operation_timeout() -> float:
    """Seconds one socket operation may wait: TIMEOUT_S, or KILN_REGISTRY_TIMEOUT_S for a registry
    slower than that (a positive number of seconds, at most a day; anything else is refused)."""
    return env_seconds("KILN_REGISTRY_TIMEOUT_S", TIMEOUT_S, 86400)


def env_seconds(name: str, default: float, maximum: float) -> float:
    """$name as a number of seconds in (0, maximum], or `default` when it is unset; anything else
    (text, 0, nan, inf, too large) is a RegistryError naming it."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= maximum:
        raise RegistryError(f"{name}={printable(raw, 40)!r} is not a number of seconds between 0 and {maximum:g}")
    return value


class Client:
    def __init__(self, registry: Registry, timeout: float | None = None) -> None:
        """`timeout`: seconds any one socket operation may wait (connect, or each read and write;
        operation_timeout() unless given). `deadline` (time.monotonic()), when set: no request or
        read goes on past it."""
        self.registry = registry
        self.subject_indexed = False  # whether the last manifest put was indexed as a referrer (OCI-Subject)
        self.timeout = operation_timeout() if timeout is None else timeout
        self.deadline: float | None = None
        self.retry_pace = 1.0  # scales the waits before retries (a fuzzer sets 0: counts, not pace)
        self._tokens: dict[str, str] = {}  # repository -> Authorization header value
        self._origin = origin(f"{registry.scheme}://{registry.host}/")
        if registry.credentials:
            remember_secret(registry.credentials[1])

    # --- transport -------------------------------------------------------------------------------
    def _url(self, repo: str, tail: str) -> str:
        return f"{self.registry.scheme}://{self.registry.host}/v2/{repo}/{tail}"

    def _late(self) -> RegistryDeadline:
        return RegistryDeadline(f"{self.registry.host}: the time allowed for the registry ran out")

    def _send(self, req: urllib.request.Request, guard: Guard, credential_origin):
        """The response to `req` under `guard`'s deadline (compiler/gitops/transport.py)."""
        left = guard.left()
        if left is not None and left <= 0:
            raise self._late()
        timeout = self.timeout if left is None else max(0.01, min(self.timeout, left))
        try:
            return send(req, guard, credential_origin, timeout)
        except RedirectRefused as e:
            raise RegistryError(str(e)) from None

    def _failed(self, e: BaseException, guard: Guard, what: str) -> RegistryError:
        """The error for a request or read that raised `e`."""
        if guard.expired:
            return self._late()
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return RegistryUnreachable(f"{self.registry.host} did not answer within {self.timeout:g}s")
        if isinstance(e, (urllib.error.URLError, ConnectionError)) or \
                (isinstance(e, OSError) and not isinstance(e, urllib.error.HTTPError)):
            return RegistryUnreachable(f"cannot reach {self.registry.host}: {reason}")
        return RegistryError(f"{what}: the registry's answer is not valid HTTP ({type(e).__name__}: {e})")

    def _open(self, method: str, url: str, repo: str, body=None, headers: dict | None = None,
              ok: tuple[int, ...] = (200,), missing: bool = False) -> Response | None:
        """The response for a request; a read the registry failed (5xx) is tried again after each
        of SERVER_ERROR_RETRY_S, within the deadline."""
        waits = SERVER_ERROR_RETRY_S if method in ("GET", "HEAD") else ()
        for wait in (*waits, None):
            try:
                return self._open_once(method, url, repo, body, headers, ok, missing)
            except RegistryServerError as e:
                if wait is None:
                    raise
                self._pause(self._retry_wait(e, wait))
        raise AssertionError("not reached: the last try returns or raises")

    def _retry_wait(self, e: RegistryServerError, wait: float) -> float:
        """The wait before retrying after `e`: its Retry-After when it asked for one (at most
        MAX_RETRY_AFTER_S: a longer one is RegistryBusy), else `wait`."""
        if e.retry_after is None:
            return wait
        if e.retry_after > MAX_RETRY_AFTER_S:
            raise RegistryBusy(f"{e} (it asks to be retried in {e.retry_after:.0f}s; Kiln waits at most "
                               f"{MAX_RETRY_AFTER_S:.0f}s)") from None
        return max(wait, e.retry_after)

    def _pause(self, wait: float) -> None:
        """Sleep `wait` seconds before a retry, unless that would pass the deadline."""
        wait *= self.retry_pace
        if self.deadline is not None and time.monotonic() + wait >= self.deadline:
            raise self._late()
        time.sleep(wait)

    def _open_once(self, method: str, url: str, repo: str, body=None, headers: dict | None = None,
                   ok: tuple[int, ...] = (200,), missing: bool = False) -> Response | None:
        """The response for a request (retried once with credentials after a 401). `missing`: a 404
        means the object is absent (None); otherwise it is an error naming the repository."""
        what = f"{method} {url}"
        if origin(url) is None:
            raise RegistryError(f"{self.registry.host}: {url!r} is not an http(s) URL")
        for attempt in (0, 1):
            h = dict(headers or {})
            if repo in self._tokens and origin(url) == self._origin:  # never to another origin
                h["Authorization"] = self._tokens[repo]
            if hasattr(body, "seek"):
                body.seek(0)
            guard = Guard(self.deadline)
            try:
                req = urllib.request.Request(url, data=body, method=method, headers=h)
                resp = self._send(req, guard, self._origin)
            except urllib.error.HTTPError as e:
                try:
                    code, challenge = e.code, e.headers.get("WWW-Authenticate", "") if e.headers else ""
                    detail = b""
                    if code != 401 and not (code == 404 and missing):
                        try:
                            detail = self._read_some(Response(e, guard), MAX_ERROR_BODY)
                        except RegistryError:
                            if guard.expired:
                                raise
                finally:
                    e.close()
                    guard.done()
                if code == 401 and attempt == 0:
                    self._authenticate(repo, challenge)
                    continue
                if code == 401:
                    raise RegistryError(f"{self.registry.host} rejected the credentials (KILN_REGISTRY_USERNAME, "
                                        "KILN_REGISTRY_PASSWORD)") from None
                if code == 404 and missing:
                    return None
                if code == 412:
                    raise RegistryConflict(f"{what}: HTTP 412 {_error_text(detail)}") from None
                if code == 400 and method == "PUT" and b"MANIFEST_BLOB_UNKNOWN" in detail:
                    raise RegistryBlobUnknown(f"{what}: HTTP 400 {_error_text(detail)}") from None
                hint = ""
                if 300 <= code < 400:
                    location = e.headers.get("Location", "") if e.headers else ""
                    raise RegistryError(f"{what}: HTTP {code} redirect to {printable(location, 200)!r} not followed "
                                        f"(only GET and HEAD follow redirects, to http(s) URLs, at most "
                                        f"{MAX_REDIRECTS})") from None
                if code >= 500 or code == 429:
                    raise RegistryServerError(f"{what}: HTTP {code} {_error_text(detail)}",
                                              retry_after(e.headers.get("Retry-After") if e.headers else None)) \
                        from None
                if code == 404 and b"NAME_UNKNOWN" in detail:
                    hint = (f" (the repository {repo} does not exist; some registries, ECR among them, need it "
                            "created before the first push)")
                raise RegistryError(f"{what}: HTTP {code} {_error_text(detail)}{hint}") from None
            except RegistryError:
                guard.done()
                raise
            except WIRE_ERRORS as e:
                guard.done()
                raise self._failed(e, guard, what) from None
            if resp.status not in ok:
                Response(resp, guard).close()
                raise RegistryError(f"{what}: unexpected HTTP {resp.status}")
            return Response(resp, guard)
        raise RegistryError(f"{what}: not authorized")  # not reached: the loop returns or raises

    def _read_some(self, resp: Response, size: int) -> bytes:
        """One read of at most `size` bytes (b"" at the end); a stalled or broken transfer, or the
        deadline passing, is the registry's failure."""
        left = resp.guard.left()
        if left is not None and left <= 0:
            raise self._late()
        resp.guard.shrink(self.timeout)
        try:
            return resp.raw.read(size)
        except WIRE_ERRORS as e:
            if resp.guard.expired:
                raise self._late() from None
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                raise RegistryUnreachable(f"{self.registry.host} stopped answering for {self.timeout:g}s") from None
            raise RegistryUnreachable(f"{self.registry.host}: transfer failed: {type(e).__name__}: {e}") from None

    def _read_all(self, resp: Response, limit: int, what: str) -> bytes:
        """The whole body, refused past `limit` bytes (read stops at limit + 1)."""
        parts, total = [], 0
        while chunk := self._read_some(resp, min(CHUNK, limit + 1 - total)):
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                raise RegistryError(f"{self.registry.host}: {what} is larger than {limit} bytes")
        return b"".join(parts)

    def _authenticate(self, repo: str, challenge: str) -> None:
        user, password = self.registry.credentials or (os.environ.get("KILN_REGISTRY_USERNAME"),
                                                       os.environ.get("KILN_REGISTRY_PASSWORD"))
        basic = None
        if user and password:
            basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            # a registry may echo the header, which decodes to the password (masked from the reference
            # or the environment, which redact reads each time)
            remember_secret(basic.removeprefix("Basic "))
        scheme, _, rest = challenge.strip().partition(" ")
        if scheme.lower() == "basic":
            if basic is None:
                raise RegistryError(f"{self.registry.host} needs credentials: set KILN_REGISTRY_USERNAME "
                                    "and KILN_REGISTRY_PASSWORD")
            self._tokens[repo] = basic
            return
        if scheme.lower() != "bearer":
            raise RegistryError(f"{self.registry.host}: unsupported authentication {printable(challenge, 100)!r}")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        realm = fields.get("realm", "")
        where = origin(realm)
        if where is None:
            raise RegistryError(f"{self.registry.host}: the token service {printable(realm, 100)!r} is not an "
                                "http(s) URL")
        if self.registry.scheme == "https" and where[0] != "https":
            raise RegistryError(f"{self.registry.host}: the token service {printable(realm, 100)!r} is plain HTTP; "
                                "credentials go over HTTPS only")
        query = {"service": fields.get("service", ""), "scope": f"repository:{repo}:pull,push"}
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        guard = Guard(self.deadline)
        try:
            req = urllib.request.Request(url, headers={"Authorization": basic} if basic else {})
            resp = Response(self._send(req, guard, where), guard)
            with resp:
                raw = self._read_all(resp, MAX_JSON, "the token answer")
        except urllib.error.HTTPError as e:
            e.close()
            guard.done()
            raise RegistryError(f"{self.registry.host}: token request failed: HTTP {e.code}") from None
        except RegistryError:
            guard.done()
            raise
        except WIRE_ERRORS as e:
            guard.done()
            raise self._failed(e, guard, f"{self.registry.host}: token request") from None
        doc = json_object(raw, f"{self.registry.host}: the token answer")
        token = doc.get("token") or doc.get("access_token")
        if not isinstance(token, str) or not _TOKEN_RE.fullmatch(token):
            raise RegistryError(f"{self.registry.host}: the token service returned no usable token")
        remember_secret(token)
        self._tokens[repo] = f"Bearer {token}"

    # --- blobs -----------------------------------------------------------------------------------
    def has_blob(self, repo: str, digest: str) -> bool:
        resp = self._open("HEAD", self._url(repo, f"blobs/{digest}"), repo, missing=True)
        if resp is None:
            return False
        resp.close()
        return True

    def push_blob(self, repo: str, digest: str, size: int, source: bytes | Path) -> bool:
        """Upload a blob unless the repository has it; True when it was uploaded (False also when
        the registry failed this upload but has the blob: another push of it came first)."""
        if self.has_blob(repo, digest):
            return False
        try:
            self._upload_blob(repo, digest, size, source)
        except RegistryServerError as failed:
            if self._appears(repo, digest):
                return False
            raise failed from None
        return True

    def _appears(self, repo: str, digest: str) -> bool:
        """Whether the blob is in the repository within BLOB_FAILED_LOOK_S (a look that fails is
        a no: the upload's own error is the one to report)."""
        for wait in BLOB_FAILED_LOOK_S:
            try:
                self._pause(wait)
                resp = self._open_once("HEAD", self._url(repo, f"blobs/{digest}"), repo, missing=True)
                if resp is not None:
                    resp.close()
                    return True
            except RegistryError:
                return False
        return False

    def _upload_blob(self, repo: str, digest: str, size: int, source: bytes | Path) -> None:
        """A monolithic upload: POST for a session, PUT of the whole blob with its digest."""
        start = self._url(repo, "blobs/uploads/")
        resp = self._open("POST", start, repo, body=b"", ok=(202,))
        location = resp.headers.get("Location")
        resp.close()
        if not location:
            raise RegistryError(f"POST {start}: the registry started an upload without a Location")
        try:
            url = urllib.parse.urljoin(start, location)
        except ValueError:
            raise RegistryError(f"POST {start}: the upload Location {location!r} is not a URL") from None
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if isinstance(source, Path):
            with open(source, "rb") as f:
                self._open("PUT", url, repo, body=f, headers=headers, ok=(201,)).close()
        else:
            self._open("PUT", url, repo, body=source, headers=headers, ok=(201,)).close()

    def fetch_blob(self, repo: str, digest: str, dest: BinaryIO, size: int) -> None:
        """Stream a blob of `size` bytes (its descriptor's) into `dest`, verifying its digest; a
        blob that runs past its size is refused at size + 1 bytes, before more is written."""
        resp = self._open("GET", self._url(repo, f"blobs/{digest}"), repo, missing=True)
        if resp is None:
            raise RegistryError(f"{self.registry.host}/{repo}: blob {digest} is missing")
        h = hashlib.sha256()
        total = 0
        with resp:
            while chunk := self._read_some(resp, min(CHUNK, size + 1 - total)):
                total += len(chunk)
                if total > size:
                    raise RegistryError(f"{self.registry.host}/{repo}: blob {digest} is larger than its "
                                        f"descriptor's {size} bytes")
                h.update(chunk)
                dest.write(chunk)
        if total != size:
            raise RegistryError(f"{self.registry.host}/{repo}: blob {digest} has {total} bytes, not its "
                                f"descriptor's {size}")
        if "sha256:" + h.hexdigest() != digest:
            raise RegistryError(f"{self.registry.host}/{repo}: blob {digest} does not match its digest")

    def read_blob(self, repo: str, digest: str, size: int) -> bytes:
        import io

        buf = io.BytesIO()
        self.fetch_blob(repo, digest, buf, size)
        return buf.getvalue()

    # --- manifests -------------------------------------------------------------------------------
    def put_manifest(self, repo: str, ref: str, body: bytes, media_type: str = OCI_MANIFEST, *,
                     create_only: bool = False) -> str:
        """`create_only`: the tag must not exist (If-None-Match: *). The OCI distribution spec does
        not define conditional manifest writes (a proposal, opencontainers/distribution-spec#251,
        is open); a registry that implements HTTP's conditional requests answers 412
        (RegistryConflict) when the tag exists, and one that does not (Distribution 2.8 ignores the
        header) writes it anyway: callers read the tag back."""
        headers = {"Content-Type": media_type}
        if create_only:
            headers["If-None-Match"] = "*"
        unknown, failed = iter(BLOB_UNKNOWN_RETRY_S), iter(SERVER_ERROR_RETRY_S)
        while True:
            try:
                resp = self._open("PUT", self._url(repo, f"manifests/{ref}"), repo, body=body, headers=headers,
                                  ok=(200, 201))
                break
            except RegistryBlobUnknown as e:
                wait = next(unknown, None)
                if wait is None:
                    raise RegistryBlobUnknown(f"{e} (still refused after {len(BLOB_UNKNOWN_RETRY_S)} retries "
                                              f"over {sum(BLOB_UNKNOWN_RETRY_S):g}s)") from None
            except RegistryServerError as e:
                wait = next(failed, None)
                if wait is None:
                    raise
                wait = self._retry_wait(e, wait)
            self._pause(wait)
        resp.close()
        # OCI 1.1: a registry that indexes referrers itself says so for a manifest with a subject
        self.subject_indexed = bool(resp.headers.get("OCI-Subject"))
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def referrers_api(self, repo: str, digest: str) -> bytes | None:
        """The registry's own referrers index of `digest` (OCI 1.1 GET /v2/<name>/referrers/<digest>),
        or None from a registry without that API (it answers 404: no such route)."""
        resp = self._open("GET", self._url(repo, f"referrers/{digest}"), repo, headers={"Accept": OCI_INDEX},
                          missing=True)
        if resp is None:
            return None
        with resp:
            body = self._read_all(resp, MAX_MANIFEST, f"{repo}: referrers of {digest}")
        if OCI_INDEX not in (resp.headers.get("Content-Type") or ""):
            return None  # a 200 that is not an index (a registry's web page): no API
        return body

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        """The digest of the manifest `ref` names, or None when there is none. The HEAD answer's
        Docker-Content-Digest is used when it is a digest; without one (the header is optional)
        the manifest is fetched and hashed: a missing header never reads as a missing tag."""
        resp = self._open("HEAD", self._url(repo, f"manifests/{ref}"), repo, headers={"Accept": OCI_MANIFEST},
                          missing=True)
        if resp is None:
            return None
        resp.close()
        said = resp.headers.get("Docker-Content-Digest")
        if isinstance(said, str) and _DIGEST_RE.fullmatch(said):
            return said
        got = self.get_manifest(repo, ref)
        return None if got is None else got[1]

    def get_manifest(self, repo: str, ref: str, accept: str = OCI_MANIFEST) -> tuple[bytes, str] | None:
        """(bytes, digest) of a manifest, verified when fetched by digest; None when absent."""
        resp = self._open("GET", self._url(repo, f"manifests/{ref}"), repo, headers={"Accept": accept},
                          missing=True)
        if resp is None:
            return None
        with resp:
            body = self._read_all(resp, MAX_MANIFEST, f"{repo}: manifest {ref}")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if ref.startswith("sha256:") and digest != ref:
            raise RegistryError(f"{self.registry.host}/{repo}: manifest {ref} does not match its digest")
        return body, digest


def json_object(data: bytes, what: str) -> dict:
    """`data` parsed as a JSON object, or a RegistryError saying why it is not one."""
    try:  # the one bounded parser: depth, number length, NaN/Infinity and UTF-8 refused alike
        doc = loads_bounded(data)
    except BoundedJSONError as e:
        raise RegistryError(f"{what} is not usable JSON: {e.message[:80]}") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{what} is not a JSON object")
    return doc


def _error_text(detail: bytes) -> str:
    """The registry's error message from its JSON error body, when it sent one (shown escaped)."""
    text = detail.decode("utf-8", "replace").strip()
    try:
        doc = json_object(detail, "error")
    except RegistryError:
        return printable(text, 200)
    errors = doc.get("errors")
    if isinstance(errors, list):
        parts = [f"{printable(e['code'], 60) if isinstance(e.get('code'), str) else '?'}: "
                 f"{printable(e['message'], 200) if isinstance(e.get('message'), str) else ''}"
                 for e in errors[:5] if isinstance(e, dict)]
        if parts:
            return "; ".join(parts)
    return printable(text, 200)
