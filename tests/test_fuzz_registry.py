"""Property tests of the registry client against answers drawn from a strategy: whatever a registry
answers (status codes, headers: sizes, digests, content types, locations, challenges; bodies:
manifests, token answers, error bodies, deep or non-object JSON, bytes; redirects), every
operation ends in its own clear error (RegistryError, or the cache's refusal) and never in another
exception; no credential reaches another origin than the registry's (or the token service it
names) and no message shows a password or a raw control character.

A real server on 127.0.0.1 answers (tests/registry_servers.py), beside a second one on another port
(another origin) that the answers redirect to. benchmarks/fuzz_registry.py runs the same check over
10,000 inputs and prints the crash count and the rate.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.gitops import artifacts as oa
from compiler.gitops.cache import RemoteCache
from compiler.gitops.oci import Client, Registry, RegistryError
from compiler.gitops.publish import TagConflict, put_tag_once
from compiler.store.local import LocalStore, StoreError
from tests.registry_servers import Answer, Request, Server

DIGEST = "sha256:" + hashlib.sha256(b"{}").hexdigest()
KEY = "sha256:" + "c" * 64
PASSWORDS = ["hunter2pw", "pa'ss\"w<o>rd", "päss wörd/x", "p@ss:w%2F", "\u2603\u2603\u2603", "x y z"]
OPERATIONS = ["has_blob", "manifest_digest", "get_manifest", "fetch_blob", "push_blob", "put_manifest",
              "put_tag_once", "cache_has", "cache_fetch"]


def _json_values():
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 30), 10 ** 30), st.floats(allow_nan=False),
                       st.text(max_size=20), st.sampled_from([DIGEST, KEY, "sha256:xyz", oa.A_KEY]))
    return st.recursive(leaves, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                       st.dictionaries(st.sampled_from(
                                                           ["errors", "code", "message", "token", "access_token",
                                                            "config", "digest", "size", "annotations", "layers",
                                                            "mediaType", oa.A_KEY, oa.A_KIND, "x"]), kids,
                                                           max_size=5)), max_leaves=6)


def _manifest(config_digest, config_size, key, kind) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "x", "digest": config_digest, "size": config_size},
                       "layers": [], "annotations": {oa.A_KEY: key, oa.A_KIND: kind}}).encode()


BODIES = st.one_of(
    st.binary(max_size=64),
    _json_values().map(lambda v: json.dumps(v).encode()),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 3000).map(lambda n: b'{"errors": ' + b"[" * n + b"]" * n + b"}"),
    st.just(b"[" * 100_000),
    st.just(b"9" * 5000),
    st.just(b"ECHO"),
    st.sampled_from([b'{"token": "tok-abc"}', b'{"access_token": "tok\\r\\nX: y"}', b'{"token": 5}',
                     b'{"errors": [{"code": "NAME_UNKNOWN", "message": "no such repository"}]}',
                     b'{"errors": [{"code": "DENIED", "message": "\\u001b[2J\\n forged"}]}', b"{}", b"ECHO"]),
    st.tuples(st.sampled_from([DIGEST, "sha256:" + "0" * 64, "sha256:bad", 5]),
              st.sampled_from([2, 0, -1, 10 ** 12, "2", None, True]),
              st.sampled_from([KEY, "other"]), st.sampled_from(["spec-snapshot", "other"]))
    .map(lambda t: _manifest(*t)),
)
STATUSES = st.one_of(st.sampled_from([200, 201, 202, 204, 206, 301, 302, 303, 307, 308, 400, 401, 403, 404, 405,
                                      412, 416, 429, 500, 502, 503]), st.integers(100, 999))
HEADER_VALUES = {  # drawn by index: far cheaper for the engine than a strategy per header
    "Content-Length": ["0", "2", "5", "-1", "abc", "99999999999", "LEN", "1e3", ""],
    "Content-Type": ["application/json", "application/vnd.oci.image.manifest.v1+json", "text/html", "", "\x01"],
    "Docker-Content-Digest": [DIGEST, "sha256:" + "0" * 64, "sha256:xyz", "", "md5:abc", "BODY"],
    "Location": ["/v2/team/app/blobs/uploads/u1", "http://{A}/v2/team/app/blobs/uploads/u2?x=1",
                 "http://{B}/elsewhere", "//{B}/scheme-relative", "file:///etc/passwd", "ftp://{A}/x", "http://[::1",
                 "", " ", "http://{A}/v2/team/app/manifests/t", "relative/path", "http://{B}:99999/bad-port",
                 "javascript:alert(1)", "http://{A}/v2/team/app/blobs/uploads/\x1b[2J"],
    "WWW-Authenticate": ['Basic realm="r"', 'Bearer realm="http://{A}/token",service="s"',
                         'Bearer realm="http://{B}/token",service="s"', 'Bearer realm="http://{A}/token-redirect"',
                         'Bearer realm="file:///x"', 'Bearer realm="http://{A}/token?a=1",scope="x"', "Bearer",
                         "Negotiate", "", 'Bearer realm=""', "Basic"],
    "Transfer-Encoding": ["chunked"],
    "Etag": ['"x"', "", "W/1"],
}
_NAMES = sorted(HEADER_VALUES)
HEADERS = st.lists(st.tuples(st.integers(0, len(_NAMES) - 1), st.integers(0, 15)), max_size=4).map(
    lambda pairs: [(_NAMES[n], HEADER_VALUES[_NAMES[n]][i % len(HEADER_VALUES[_NAMES[n]])]) for n, i in pairs])


@st.composite
def answers(draw) -> Answer:
    body = draw(BODIES)
    headers = draw(HEADERS)
    if draw(st.booleans()):  # most registries say how long the body is
        headers.append(("Content-Length", "LEN"))
    repeat = draw(st.sampled_from([1] * 15 + [40_000]))  # now and then an answer of megabytes
    return Answer(draw(STATUSES), headers, body, repeat=repeat)


@dataclass
class Case:
    script: list[Answer]  # the i-th request gets script[min(i, len - 1)]
    operation: str
    password: str | None
    size: int  # the blob's descriptor size
    challenge: str | None = None  # the first answer asks for credentials thus (so that they are sent)


CASES = st.builds(Case, st.lists(answers(), min_size=1, max_size=6), st.sampled_from(OPERATIONS),
                  st.one_of(st.none(), st.sampled_from(PASSWORDS)), st.sampled_from([0, 2, 5, 1000]),
                  st.one_of(st.none(), st.sampled_from(HEADER_VALUES["WWW-Authenticate"][:4])))


class Harness:
    """The two servers (the registry's origin A and another origin B) and the checks of one input."""

    def __init__(self) -> None:
        self._case: Case | None = None
        self._count = 0
        self._lock = threading.Lock()
        self.a = Server(self._answer)
        self.b = Server(self._answer)
        self._tmp = tempfile.TemporaryDirectory(prefix="kiln-fuzz-registry-")
        self.store = LocalStore(Path(self._tmp.name) / "store")

    def _answer(self, req: Request) -> Answer:
        with self._lock:
            case, i = self._case, self._count
            self._count += 1
        if case is None:
            return Answer(500)
        if req.path.startswith("/token-redirect"):
            return Answer(307, [("Location", f"http://{self.b.host}/token"), ("Content-Length", "0")])
        if req.path.startswith("/token") and case.challenge is not None and i == 1:
            a = Answer(200, [], b'{"token": "tok-sekrit-fuzz"}')
        elif case.challenge is not None and i == 0:
            a = Answer(401, [("WWW-Authenticate", case.challenge), ("Content-Length", "0")])
        else:
            a = case.script[min(i, len(case.script) - 1)]
        body = a.body
        if body == b"ECHO":  # a registry that echoes what it was sent, credentials included
            auth = req.headers.get("Authorization", "")
            try:
                decoded = base64.b64decode(auth.split(" ", 1)[-1]).decode("utf-8", "replace")
            except ValueError:
                decoded = ""
            body = json.dumps({"errors": [{"code": "DENIED", "message": f"{auth} {decoded}"}]}).encode()
        headers = []
        for name, value in a.headers:
            value = value.replace("{A}", self.a.host).replace("{B}", self.b.host)
            if value == "LEN":
                value = str(len(body) * a.repeat)
            elif value == "BODY":
                value = "sha256:" + hashlib.sha256(body).hexdigest()
            headers.append((name, value))
        return Answer(a.status, headers, body, repeat=a.repeat)

    def run(self, case: Case) -> str | None:
        """None when the client behaved; else what went wrong (a traceback or a broken property)."""
        with self._lock:
            self._case, self._count = case, 0
        self.b.requests.clear()
        registry = Registry.parse(f"{self.a.host}/team")
        if case.password is not None:
            registry = Registry(registry.host, registry.namespace, registry.scheme, ("kiln", case.password))
        client = Client(registry, timeout=5)
        client.retry_pace = 0.0  # failed requests are still retried, without the waits between
        client.deadline = time.monotonic() + 20  # no input may take longer (nothing here drips)
        message = ""
        try:
            self._operate(case, client, registry)
        except (RegistryError, TagConflict, StoreError) as e:
            message = str(e)
        except ValueError as e:
            if case.operation != "cache_fetch":  # the cache's own refusals of a bad artifact
                return traceback.format_exc()
            message = str(e)
        except Exception:  # noqa: BLE001 - any other exception is the crash being looked for
            return traceback.format_exc()
        finally:
            with self._lock:
                self._case = None
        if case.password is not None:
            basic = base64.b64encode(f"kiln:{case.password}".encode()).decode()
            if case.password in message or basic in message:
                return f"the password is shown: {message!r}"
        if "tok-sekrit-fuzz" in message:
            return f"the token is shown: {message!r}"
        if any(not c.isprintable() for c in message):
            return f"a control character is shown: {message!r}"
        for r in self.b.requests:  # another origin: the token service named in a challenge may get
            auth = r.headers.get("Authorization", "")  # Basic credentials, nothing else does
            if auth and not (r.path.startswith("/token") and auth.startswith("Basic ")):
                return f"credentials went to another origin: {r.method} {r.path} {auth[:20]}..."
        return None

    def _operate(self, case: Case, client: Client, registry: Registry) -> None:
        repo, op = "team/app", case.operation
        if op == "has_blob":
            client.has_blob(repo, DIGEST)
        elif op == "manifest_digest":
            client.manifest_digest(repo, "t")
        elif op == "get_manifest":
            client.get_manifest(repo, "sha256:" + "0" * 64 if case.size == 5 else "t")
        elif op == "fetch_blob":
            with tempfile.TemporaryFile() as f:
                client.fetch_blob(repo, DIGEST, f, case.size)
                if f.tell() > case.size:
                    raise AssertionError(f"wrote {f.tell()} bytes of a {case.size}-byte blob")
        elif op == "push_blob":
            client.push_blob(repo, DIGEST, 2, b"{}")
        elif op == "put_manifest":
            client.put_manifest(repo, "t", b"{}", create_only=True)
        elif op == "put_tag_once":
            put_tag_once(client, repo, "t", b"{}")
        else:
            cache = RemoteCache(registry, self.store, warn=lambda line: None, timeout=5, budget=20)
            cache.client = client
            if op == "cache_has":
                cache.has(KEY, "spec-snapshot")
            else:
                cache._fetch("spec-snapshot", KEY, "spec-snapshot")

    def close(self) -> None:
        self.a.stop()
        self.b.stop()
        self._tmp.cleanup()


_HARNESS: Harness | None = None


def harness() -> Harness:
    global _HARNESS
    if _HARNESS is None:
        _HARNESS = Harness()
    return _HARNESS


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(CASES)
def test_no_registry_answer_crashes_the_client_or_leaks_a_credential(case: Case) -> None:
    problem = harness().run(case)
    assert problem is None, problem


def teardown_module() -> None:
    global _HARNESS
    if _HARNESS is not None:
        _HARNESS.close()
        _HARNESS = None
