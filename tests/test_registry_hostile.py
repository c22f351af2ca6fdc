"""What a hostile or broken registry answers never crashes Kiln, never makes it read without bound,
never moves a commit's tag and never gets credentials it should not (issue 25). Against in-process
HTTP servers on 127.0.0.1 (tests/registry_servers.py) and, for publishing, the real registry
(Debian docker-registry), sometimes behind a relay that strips a header or orders two writes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler.build import build_spec
from compiler.cli import main
from compiler.gitops.cache import RemoteCache
from compiler.gitops.oci import MAX_JSON, MAX_MANIFEST, Client, Registry, RegistryDeadline, RegistryError, redact
from compiler.store.local import LocalStore
from tests.gitrepo import GitRepo
from tests.registry_servers import Answer, Relay, Request, Server
from tests.test_gitops_registry import _build, _publish, light_spec

ROOT = Path(__file__).resolve().parents[1]
DEEP = b"[" * 100_000 + b"]" * 100_000
DIGEST = "sha256:" + "a" * 64
JSON_ERR = [("Content-Type", "application/json")]


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch) -> None:
    """The client's waits before retrying a failed request, cut to milliseconds: the servers here
    fail on purpose, and the count of retries, not their pace, is what is checked."""
    import compiler.gitops.oci as oci

    monkeypatch.setattr(oci, "BLOB_UNKNOWN_RETRY_S", (0.01, 0.02, 0.04, 0.08))
    monkeypatch.setattr(oci, "SERVER_ERROR_RETRY_S", (0.01, 0.02, 0.04))
    monkeypatch.setattr(oci, "BLOB_FAILED_LOOK_S", (0.0, 0.01))


def _client(server: Server, credentials: tuple[str, str] | None = None, timeout: float = 10) -> Client:
    registry = Registry.parse(server.host)
    if credentials is not None:
        registry = Registry(registry.host, registry.namespace, registry.scheme, credentials)
    return Client(registry, timeout=timeout)


def _raises(call) -> RegistryError:
    with pytest.raises(RegistryError) as info:
        call()
    return info.value


# --- 1. answers that are no answer: clear errors naming the registry ---------------------------------
@pytest.mark.parametrize("body", [DEEP, b"[1, 2]", b'"text"', b"7", b"null", b'{"errors": [1, {"code": 5}]}',
                                  b'{"errors": ' + DEEP + b"}", b"\xff\xfe not utf-8", b"1" * 5000],
                         ids=["deep", "list", "string", "number", "null", "odd-errors", "deep-errors", "bytes",
                              "huge-int"])
def test_an_error_body_of_any_shape_is_a_clear_error_naming_the_registry(body: bytes) -> None:
    with Server(lambda r: Answer(500, JSON_ERR + [("Content-Length", str(len(body)))], body)) as s:
        e = _raises(lambda: _client(s).push_blob("team/app", DIGEST, 2, b"{}"))
    assert s.host in str(e) and "team/app" in str(e) and "HTTP 500" in str(e)


@pytest.mark.parametrize("body", [DEEP, b"[]", b"5", b'{"token": 5}', b'{"token": ["x"]}',
                                  b'{"token": "a\\r\\nInjected: 1"}', b'{"access_token": ""}', b"{"],
                         ids=["deep", "list", "number", "int-token", "list-token", "header-injection",
                              "empty-token", "truncated"])
def test_a_token_answer_that_is_no_token_is_a_clear_error(body: bytes) -> None:
    def answer(r: Request) -> Answer:
        if r.path.startswith("/token"):
            return Answer(200, JSON_ERR, body)
        return Answer(401, [("WWW-Authenticate", f'Bearer realm="http://{s.host}/token",service="x"')])

    with Server(answer) as s:
        e = _raises(lambda: _client(s).manifest_digest("team/app", "v1"))
    assert s.host in str(e) and "token" in str(e)


@pytest.mark.parametrize("body", [DEEP, b"[]", b'{"config": 3}', b'{"config": {"digest": "' + DIGEST.encode()
                                  + b'", "size": 99999999999}}', b'{"config": {"digest": "x", "size": 2}}'],
                         ids=["deep", "list", "config-not-object", "config-too-large", "config-not-digest"])
def test_a_cached_manifest_of_any_shape_is_a_miss_with_a_warning(tmp_path, body: bytes) -> None:
    spec = light_spec(tmp_path / "spec")
    store = LocalStore(tmp_path / "store")
    with Server(lambda r: Answer(200, [("Content-Type", "application/vnd.oci.image.manifest.v1+json"),
                                       ("Content-Length", str(len(body)))], body)) as s:
        warnings: list[str] = []
        outcome = build_spec(spec, store, remote=RemoteCache(Registry.parse(s.host), store, warn=warnings.append))
    assert not outcome.failed and outcome.executed
    assert warnings and all(s.host in w and "building it here" in w for w in warnings), warnings


def test_an_upload_answered_404_name_unknown_is_a_clear_error(tmp_path, capsys) -> None:
    """ECR answers a push to a repository that does not exist with 404 NAME_UNKNOWN."""
    body = b'{"errors":[{"code":"NAME_UNKNOWN","message":"The repository with name \'x\' does not exist"}]}'

    def answer(r: Request) -> Answer:
        if r.method == "POST":
            return Answer(404, JSON_ERR + [("Content-Length", str(len(body)))], body)
        return Answer(404, [("Content-Length", "0")])

    spec = light_spec(tmp_path / "spec")
    _build(spec, tmp_path / "A", capsys)
    with Server(answer) as s:
        code = main(["publish", str(spec), "--store", str(tmp_path / "A"), "--registry", f"{s.host}/team",
                     "--commit", "1" * 40])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert f"{s.host}/v2/team/" in err and "NAME_UNKNOWN" in err and "does not exist" in err, err
    assert "created before the first push" in err


def test_a_redirect_to_a_file_url_or_a_redirect_loop_is_refused() -> None:
    with Server(lambda r: Answer(302, [("Location", "file:///etc/passwd"), ("Content-Length", "0")])) as s:
        e = _raises(lambda: _client(s).get_manifest("team/app", "v1"))
        assert "file:///etc/passwd" in str(e) and "not an http(s) URL" in str(e)
    with Server(lambda r: Answer(302, [("Location", r.path), ("Content-Length", "0")])) as s:
        e = _raises(lambda: _client(s).get_manifest("team/app", "v1"))
        assert s.host in str(e) and "more than 5 redirects" in str(e) and len(s.requests) <= 10
    # the body of a redirect is not read (urllib would read all of it, here 64 MiB)
    with Server(lambda r: Answer(307, [("Location", "/gone")], b"\0" * (1 << 20), repeat=64)
                if "manifests" in r.path else Answer(404, [("Content-Length", "0")])) as s:
        assert _client(s).get_manifest("team/app", "v1") is None


def test_control_characters_from_a_registry_reach_the_terminal_escaped() -> None:
    body = json.dumps({"errors": [{"code": "DENIED", "message": "\x1b]0;owned\x07\x1b[2J\nkiln: fake line"}]})
    with Server(lambda r: Answer(403, JSON_ERR, body.encode())) as s:
        e = _raises(lambda: _client(s).get_manifest("team/app", "v1"))
    assert not any(c in str(e) for c in "\x1b\x07\n") and "\\x1b" in str(e)


# --- 2. bounded reads and the overall deadline --------------------------------------------------------
def test_a_blob_longer_than_its_descriptor_is_refused_at_its_size_plus_one() -> None:
    chunk = b"\0" * (1 << 20)
    with Server(lambda r: Answer(200, [], chunk, repeat=64)) as s:  # no Content-Length, 64 MiB
        dest = io.BytesIO()
        e = _raises(lambda: _client(s).fetch_blob("team/app", DIGEST, dest, 1000))
    assert "larger than its descriptor's 1000 bytes" in str(e) and s.host in str(e)
    assert len(dest.getvalue()) <= 1000


@pytest.mark.parametrize("what", ["manifest", "token"])
def test_an_endless_json_answer_is_refused_at_its_maximum(what: str) -> None:
    chunk = b" " * (1 << 20)

    def answer(r: Request) -> Answer:
        if what == "token" and not r.path.startswith("/token"):
            return Answer(401, [("WWW-Authenticate", f'Bearer realm="http://{s.host}/token"')])
        return Answer(200, [], b'{"token": "' + chunk, repeat=64)

    with Server(answer) as s:
        e = _raises(lambda: _client(s).get_manifest("team/app", "v1"))
    assert f"larger than {MAX_MANIFEST if what == 'manifest' else MAX_JSON} bytes" in str(e)


@pytest.mark.parametrize("drip_head", [True, False], ids=["headers", "body"])
def test_a_registry_that_drips_is_cut_off_at_the_deadline(drip_head: bool) -> None:
    """One byte every half second never trips the 10 s per-read timeout; the deadline does."""
    body = b'{"schemaVersion": 2}' * 500
    with Server(lambda r: Answer(200, [("Content-Length", str(len(body)))], body, drip_s=0.5,
                                 drip_head=drip_head)) as s:
        client = _client(s)
        client.deadline = time.monotonic() + 2.0
        with pytest.raises(RegistryDeadline) as info:
            client.get_manifest("team/app", "v1")
    assert s.host in str(info.value)


def test_a_dripping_cache_costs_the_build_its_budget_and_one_warning(tmp_path) -> None:
    spec = light_spec(tmp_path / "spec")
    store = LocalStore(tmp_path / "store")
    body = b"x" * 10_000
    with Server(lambda r: Answer(200, [("Content-Length", str(len(body)))], body, drip_s=0.5)) as s:
        warnings: list[str] = []
        cache = RemoteCache(Registry.parse(s.host), store, warn=warnings.append, timeout=30, budget=3)
        outcome = build_spec(spec, store, remote=cache)
    assert not outcome.failed and outcome.executed
    assert len(warnings) == 1 and "KILN_CACHE_BUDGET_S" in warnings[0] and s.host in warnings[0], warnings
    assert len(s.requests) == 1  # nothing more was asked of it


# --- 3. publish integrity -------------------------------------------------------------------------
def _repo_with_models_outside_the_spec(root: Path) -> tuple[GitRepo, Path]:
    """deploy/kiln.yaml whose model directory is ../models/tiny (elsewhere in the repository)."""
    repo = GitRepo(root)
    light_spec(repo.root / "deploy")
    shutil.move(repo.root / "deploy" / "model", repo.root / "models" / "tiny")
    spec = repo.root / "deploy" / "kiln.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("source: {path: model}", "source: {path: ../models/tiny}"),
                    encoding="utf-8")
    (repo.root / ".gitignore").write_text("*.bak\n", encoding="utf-8")
    return repo, spec


def test_publish_refuses_an_uncommitted_input_outside_the_spec_directory(tmp_path, registry, capsys) -> None:
    repo, spec = _repo_with_models_outside_the_spec(tmp_path / "repo")
    head = repo.commit("spec and models")
    store, target = tmp_path / "store", f"{registry.host}/inputs"
    client = Client(Registry.parse(target))

    tokenizer = repo.root / "models" / "tiny" / "tokenizer_config.json"
    tokenizer.write_text(tokenizer.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # tracked, edited
    _build(spec, store, capsys)
    assert main(["publish", str(spec), "--store", str(store), "--registry", target]) == 1
    err = capsys.readouterr().err
    assert f"differs from commit {head[:12]} (models/tiny/tokenizer_config.json)" in err and "--allow-dirty" in err
    assert client.manifest_digest("inputs/quickstart", head) is None  # nothing tagged

    repo.git("checkout", "--", "models/tiny/tokenizer_config.json")
    (repo.root / "models" / "tiny" / "extra.bak").write_text("ignored by git, read by the build\n", encoding="utf-8")
    _build(spec, store, capsys)
    assert main(["publish", str(spec), "--store", str(store), "--registry", target]) == 1
    assert "(models/tiny/extra.bak)" in capsys.readouterr().err  # an ignored input is pinned by no commit
    (repo.root / "models" / "tiny" / "extra.bak").unlink()

    (repo.root / "deploy" / "kiln.lock").write_text("{}", encoding="utf-8")  # the lock file, never committed
    repo.git("add", "deploy/kiln.lock")
    repo.commit("lock")
    (repo.root / "deploy" / "kiln.lock").unlink()  # deleted: the commit's build would read it
    assert main(["publish", str(spec), "--store", str(store), "--registry", target]) == 1
    assert "deploy/kiln.lock" in capsys.readouterr().err


def test_publish_refuses_an_input_outside_the_repository_under_a_commit_tag(tmp_path, registry, capsys,
                                                                           monkeypatch) -> None:
    repo = GitRepo(tmp_path / "repo")
    light_spec(repo.root / "deploy")
    models = tmp_path / "models-root"
    shutil.move(repo.root / "deploy" / "model", models / "tiny")
    monkeypatch.setenv("KILN_MODELS", str(models))
    spec = repo.root / "deploy" / "kiln.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("source: {path: model}",
                                                             f"source: {{path: {models / 'tiny'}}}"), encoding="utf-8")
    repo.commit("spec")
    _build(spec, tmp_path / "store", capsys)
    assert main(["publish", str(spec), "--store", str(tmp_path / "store"), "--registry", f"{registry.host}/out"]) == 1
    err = capsys.readouterr().err
    assert "outside the repository" in err and str(models / "tiny") in err and "--allow-dirty" in err
    out = _publish(spec, tmp_path / "store", f"{registry.host}/out", capsys, "--allow-dirty")
    assert re.search(r":dirty-[0-9a-f]{12}-[0-9a-f]{16}@", out), out


def _strip_digest(req: Request, answer: Answer) -> Answer:
    answer.headers = [(k, v) for k, v in answer.headers if k.lower() != "docker-content-digest"]
    return answer


def test_a_registry_without_digest_headers_cannot_move_a_commit_tag(tmp_path, registry, capsys) -> None:
    """Docker-Content-Digest is optional: its absence means unknown, and the manifest is hashed."""
    spec = light_spec(tmp_path / "spec")
    commit = "7" * 40
    _build(spec, tmp_path / "A", capsys)
    _publish(spec, tmp_path / "A", f"{registry.host}/nohead", capsys, "--commit", commit)
    client = Client(Registry.parse(registry.host))
    tagged = client.manifest_digest("nohead/quickstart", commit)
    spec.write_text(spec.read_text(encoding="utf-8").replace("max_queue_size: 16", "max_queue_size: 32"),
                    encoding="utf-8")
    _build(spec, tmp_path / "A", capsys)
    with Relay(registry.host, edit=_strip_digest) as relay:
        assert Client(Registry.parse(relay.host)).manifest_digest("nohead/quickstart", commit) == tagged
        code = main(["publish", str(spec), "--store", str(tmp_path / "A"), "--registry", f"{relay.host}/nohead",
                     "--commit", commit])
        err = capsys.readouterr().err
        assert not any("docker-content-digest" in k.lower() for r in relay.requests for k in r.headers)
    assert code == 1 and f"nohead/quickstart:{commit} already names other content ({tagged})" in err, err
    assert client.manifest_digest("nohead/quickstart", commit) == tagged


def test_two_concurrent_publishes_of_one_commit_one_wins_and_the_other_says_so(tmp_path, registry, capsys) -> None:
    """Both check the tag before either writes it (the relay holds the two writes until both have
    come): Distribution ignores If-None-Match, so both writes land; the read-back tells the one
    whose content the tag does not name, and it fails naming the winner's digest."""
    commit = "8" * 40
    specs = []
    for i, queue in enumerate(("16", "48")):
        spec = light_spec(tmp_path / f"spec{i}")
        spec.write_text(spec.read_text(encoding="utf-8").replace("max_queue_size: 16", f"max_queue_size: {queue}"),
                        encoding="utf-8")
        _build(spec, tmp_path / f"store{i}", capsys)
        specs.append(spec)
    # The relay holds the first tag write until the second comes. On a busy machine (the other
    # test worker quantizing) the second publish has come more than a minute late: the held one
    # must outwait it, so the client's per-operation timeout is raised above the hold.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KILN_REGISTRY_TIMEOUT_S": "400"}
    with Relay(registry.host, hold=(f"/manifests/{commit}",), hold_s=300) as relay:
        procs = [subprocess.Popen([sys.executable, "-m", "compiler", "publish", str(spec), "--store",
                                   str(tmp_path / f"store{i}"), "--registry", f"{relay.host}/race", "--commit", commit],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for i, spec in enumerate(specs)]
        outs = [p.communicate(timeout=600) for p in procs]
        order = list(relay.forwarded_order)
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], outs
    assert len(order) == 2, outs  # both writes reached the registry: the check alone let both through
    winner_digest = "sha256:" + hashlib.sha256(order[-1]).hexdigest()  # the later write is what the tag names
    tagged = Client(Registry.parse(registry.host)).manifest_digest("race/quickstart", commit)
    assert tagged == winner_digest
    won, lost = (outs[0], outs[1]) if codes[0] == 0 else (outs[1], outs[0])
    assert f"@{tagged}" in won[0]
    assert "another publish wrote this tag at the same time" in lost[1] and f"the tag names {tagged}" in lost[1], lost
    assert "Traceback" not in lost[1]


BLOB_UNKNOWN = (b'{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN","message":"blob unknown to registry",'
                b'"detail":"sha256:' + b"b" * 64 + b'"}]}')


@pytest.mark.parametrize("refusals", [2, 99], ids=["transient", "for-good"])
def test_a_manifest_refused_for_an_unknown_blob_is_retried_a_bounded_number_of_times(refusals: int) -> None:
    """Distribution answers MANIFEST_BLOB_UNKNOWN for a moment while another push links the same blob
    (the concurrent-publish test met it 2 times in 20): the write is retried a few times, then fails
    naming the blob."""
    puts: list[Request] = []

    def answer(r: Request) -> Answer:
        puts.append(r)
        if len(puts) <= refusals:
            return Answer(400, JSON_ERR + [("Content-Length", str(len(BLOB_UNKNOWN)))], BLOB_UNKNOWN)
        return Answer(201, [("Content-Length", "0")])

    with Server(answer) as s:
        client = _client(s)
        if refusals == 2:
            assert client.put_manifest("team/app", "v1", b"{}") == "sha256:" + hashlib.sha256(b"{}").hexdigest()
            assert len(puts) == 3
        else:
            e = _raises(lambda: client.put_manifest("team/app", "v1", b"{}"))
            assert len(puts) == 5 and "MANIFEST_BLOB_UNKNOWN" in str(e) and "after 4 retries" in str(e), e
    assert all(r.method == "PUT" and r.body == b"{}" for r in puts)


@pytest.mark.parametrize("there_after", [True, False], ids=["another-push-won", "really-failed"])
def test_an_upload_the_registry_fails_is_done_when_the_blob_is_there_after_all(there_after: bool) -> None:
    """Distribution fails the later of two simultaneous uploads of one blob with HTTP 500 (two
    concurrent publishes met it once in 24): the blob is there, so the push is done; a 500 with
    no blob behind it is still the registry's error."""
    seen: list[str] = []

    def answer(r: Request) -> Answer:
        seen.append(r.method)
        if r.method == "HEAD":
            found = there_after and "PUT" in seen
            return Answer(200 if found else 404, [("Content-Length", "2" if found else "0")])
        if r.method == "POST":
            return Answer(202, [("Location", "/v2/team/app/blobs/uploads/u1"), ("Content-Length", "0")])
        return Answer(500, JSON_ERR + [("Content-Length", "2")], b"{}")

    with Server(answer) as s:
        client = _client(s)
        if there_after:
            assert client.push_blob("team/app", DIGEST, 2, b"{}") is False
            assert seen == ["HEAD", "POST", "PUT", "HEAD"]
        else:
            e = _raises(lambda: client.push_blob("team/app", DIGEST, 2, b"{}"))
            assert "PUT" in str(e) and "HTTP 500" in str(e) and seen == ["HEAD", "POST", "PUT", "HEAD", "HEAD"], e


@pytest.mark.parametrize("failures", [2, 99], ids=["transient", "for-good"])
def test_a_read_the_registry_fails_is_retried_a_bounded_number_of_times(failures: int) -> None:
    """A HEAD of a blob that another push is linking gets HTTP 500 from Distribution for a moment
    (met once in 60 concurrent publishes): reads are retried (3 times), writes of an upload are not."""
    heads: list[Request] = []

    def answer(r: Request) -> Answer:
        heads.append(r)
        if len(heads) <= failures:
            return Answer(500, [("Content-Length", "0")])
        return Answer(200, [("Content-Length", "2")])

    with Server(answer) as s:
        client = _client(s)
        if failures == 2:
            assert client.has_blob("team/app", DIGEST) and len(heads) == 3
        else:
            e = _raises(lambda: client.has_blob("team/app", DIGEST))
            assert "HTTP 500" in str(e) and len(heads) == 4, e
    assert {r.method for r in heads} == {"HEAD"}


# --- 4. credentials -------------------------------------------------------------------------------
class _TwoOrigins:
    """Server A (the registry) asks for credentials, then redirects to server B (another port:
    another origin), which records what it is sent."""

    def __init__(self, scheme: str) -> None:
        self.b = Server(lambda r: Answer(404, [("Content-Length", "0")]))
        self.a = Server(self._answer)
        self.scheme = scheme

    def _answer(self, r: Request) -> Answer:
        if r.path.startswith("/token"):
            if "redirect" in r.path:
                return Answer(307, [("Location", self.b.url("/token?x=1")), ("Content-Length", "0")])
            return Answer(200, JSON_ERR, b'{"token": "tok-sekrit-123"}')
        if "Authorization" not in r.headers:
            if self.scheme == "basic":
                challenge = 'Basic realm="a"'
            else:
                where = "/token-redirect" if self.scheme == "bearer-realm-redirect" else "/token"
                challenge = f'Bearer realm="{self.a.url(where)}",service="a"'
            return Answer(401, [("WWW-Authenticate", challenge), ("Content-Length", "0")])
        return Answer(307, [("Location", self.b.url(r.path)), ("Content-Length", "0")])

    def close(self) -> None:
        self.a.stop()
        self.b.stop()


@pytest.mark.parametrize("scheme", ["basic", "bearer", "bearer-realm-redirect"])
def test_credentials_never_follow_a_redirect_to_another_origin(scheme: str) -> None:
    servers = _TwoOrigins(scheme)
    try:
        client = _client(servers.a, credentials=("kiln", "pa ss'w\"o/rd<é"))
        try:
            client.manifest_digest("team/app", "v1")
        except RegistryError:
            pass  # the realm's redirect ends at B's 404: no token
        seen_by_a = [r.headers.get("Authorization") for r in servers.a.requests]
        seen_by_b = [r.headers for r in servers.b.requests]
    finally:
        servers.close()
    assert any(seen_by_a), "the registry itself was never sent the credentials"
    assert seen_by_b, "the redirect was not followed"
    assert not any(k.lower() == "authorization" for h in seen_by_b for k in h), seen_by_b


SECRETS = ["pa'ss", 'pa"ss', "pa<ss>", "pa/ss", "pa ss", "päss wörd", "p@ss:w", "x%2Fy", "\u2603snow"]


@pytest.mark.parametrize("secret", SECRETS)
def test_no_message_prints_a_password_whatever_its_characters(tmp_path, capsys, secret: str) -> None:
    spec = light_spec(tmp_path / "spec")
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}

    def shown(text: str) -> bool:
        return any(f in text for f in forms)

    code = main(["build", str(spec), "--store", str(tmp_path / "A"), "-q", "--cache", f"kiln:{secret}@bad host/x"])
    err = capsys.readouterr().err
    assert code == 2 and "not a registry reference" in err and not shown(err), err
    code = main(["publish", str(spec), "--store", str(tmp_path / "A"), "--commit", "1" * 40,
                 "--registry", f"kiln:{secret}@127.0.0.1:1/Bad Name"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "not a registry reference" in err and not shown(err), err
    code = main(["init", str(spec), "--dir", str(tmp_path), "--registry", f"kiln:{secret}@127.0.0.1:5000/x",
                 "--kiln-repo", "https://git.example/acme/kiln", "--kiln-commit", "0123456789abcdef" * 2 + "01234567"])
    err = capsys.readouterr().err
    assert code == 2 and "carries credentials" in err and not shown(err), err
    assert not list(tmp_path.rglob("*.yml"))  # no workflow was written
    # a registry that echoes the password in its error body, in whatever escaping
    echo = json.dumps({"errors": [{"code": "DENIED", "message": f"bad password {secret}"}]}).encode()
    with Server(lambda r: Answer(401, [("WWW-Authenticate", 'Basic realm="x"')], b"")
                if "Authorization" not in r.headers else Answer(403, JSON_ERR, echo)) as s:
        e = _raises(lambda: Client(Registry.parse(f"kiln:{secret}@{s.host}")).get_manifest("team/app", "v1"))
    assert "DENIED" in str(e) and not shown(str(e)), str(e)
    assert not shown(redact(f"cache kiln:{secret}@ghcr.io/team: down"))


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_an_echoed_authorization_header_is_masked(monkeypatch, scheme: str) -> None:
    """The Basic header's value decodes to user:password, and a bearer token is a credential too."""
    import base64

    monkeypatch.setenv("KILN_REGISTRY_USERNAME", "kiln")
    monkeypatch.setenv("KILN_REGISTRY_PASSWORD", "echo-me-pw")

    def answer(r: Request) -> Answer:
        if r.path.startswith("/token"):
            return Answer(200, JSON_ERR, b'{"token": "tok-echoed-42"}')
        auth = r.headers.get("Authorization")
        if auth is None:
            challenge = 'Basic realm="x"' if scheme == "basic" else f'Bearer realm="http://{s.host}/token"'
            return Answer(401, [("WWW-Authenticate", challenge), ("Content-Length", "0")])
        decoded = base64.b64decode(auth.split(" ", 1)[1]).decode() if auth.startswith("Basic ") else ""
        body = json.dumps({"errors": [{"code": "DENIED", "message": f"you sent {auth} ({decoded})"}]}).encode()
        return Answer(403, JSON_ERR, body)

    with Server(answer) as s:
        e = _raises(lambda: _client(s).get_manifest("team/app", "v1"))
    text = str(e)
    assert "DENIED: you sent" in text, text
    for secret in ("echo-me-pw", base64.b64encode(b"kiln:echo-me-pw").decode(), "tok-echoed-42"):
        assert secret not in text, text


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "nan", "inf", "1e9"])
def test_a_registry_timeout_that_is_not_a_number_of_seconds_is_refused(monkeypatch, raw) -> None:
    from compiler.gitops.oci import RegistryError, operation_timeout

    monkeypatch.setenv("KILN_REGISTRY_TIMEOUT_S", raw)
    with pytest.raises(RegistryError, match="KILN_REGISTRY_TIMEOUT_S"):
        operation_timeout()
    monkeypatch.setenv("KILN_REGISTRY_TIMEOUT_S", "90")
    assert operation_timeout() == 90.0 and Client(Registry.parse("127.0.0.1:1")).timeout == 90.0
    monkeypatch.delenv("KILN_REGISTRY_TIMEOUT_S")
    assert Client(Registry.parse("127.0.0.1:1")).timeout == 60


@pytest.mark.parametrize("raw", ["inf", "1e308"])
def test_a_cache_budget_of_inf_is_a_long_budget_not_a_traceback_per_request(tmp_path, monkeypatch, raw) -> None:
    """Issue 36: the deadline arithmetic met inf on every request (a traceback each)."""
    monkeypatch.setenv("KILN_CACHE_BUDGET_S", raw)
    with Server(lambda r: Answer(404, [("Content-Length", "0")])) as s:
        warnings: list[str] = []
        cache = RemoteCache(Registry.parse(s.host), LocalStore(tmp_path / "store"), warn=warnings.append)
        assert cache.budget == 30 * 86400.0
        assert cache.has("sha256:" + "c" * 64, "spec-snapshot") is False
        assert cache.has("sha256:" + "d" * 64, "spec-snapshot") is False
    assert warnings == [] and len(s.requests) == 2


def test_the_first_ctrl_c_stops_a_registry_cache_fetch_where_it_is(tmp_path) -> None:
    """Issue 36: the fetch runs in the executor's own thread; the first Ctrl-C said "stopping" and
    the transfer went on (a dripping registry: until KILN_CACHE_BUDGET_S, an hour)."""
    import signal

    spec = light_spec(tmp_path / "spec")
    body = b'{"schemaVersion": 2}' * 500
    with Server(lambda r: Answer(200, [("Content-Length", str(len(body)))], body, drip_s=0.5)) as s:
        proc = subprocess.Popen([sys.executable, "-m", "compiler", "build", str(spec), "--store",
                                 str(tmp_path / "store"), "--cache", s.host], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            for _ in range(600):  # the build reached its first cache request (at most a minute)
                if s.requests or proc.poll() is not None:
                    break
                time.sleep(0.1)
            assert s.requests, proc.communicate(timeout=5)
            time.sleep(0.5)  # inside the transfer
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)  # the dripping answer alone would take 5,000 s
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 130, err
    assert "stopping the fetch of" in err and "Traceback" not in err, err
    assert not any((tmp_path / "store" / "releases").glob("*.jsonl")), "an interrupted build records no release"


# --- issue 36: Retry-After is honoured, within a bound, and a failing cache is not asked per action --
def test_a_retry_waits_what_retry_after_asks_for() -> None:
    seen: list[float] = []

    def answer(r: Request) -> Answer:
        seen.append(time.monotonic())
        if len(seen) <= 2:
            return Answer(503, [("Retry-After", "1"), ("Content-Length", "0")])
        return Answer(200, [("Content-Length", "2")])

    with Server(answer) as s:
        assert _client(s).has_blob("team/app", DIGEST)
    assert len(seen) == 3 and seen[1] - seen[0] >= 0.9 and seen[2] - seen[1] >= 0.9, seen


@pytest.mark.parametrize("header", ["3600", "Wed, 21 Oct 2099 07:28:00 GMT"], ids=["seconds", "http-date"])
def test_a_retry_after_past_the_bound_is_not_waited_for(header: str) -> None:
    from compiler.gitops.oci import RegistryBusy

    with Server(lambda r: Answer(429, [("Retry-After", header), ("Content-Length", "0")])) as s:
        with pytest.raises(RegistryBusy, match="retried in"):
            _client(s).has_blob("team/app", DIGEST)
        assert len(s.requests) == 1


def test_retry_after_values() -> None:
    from compiler.gitops.oci import retry_after

    assert retry_after("120") == 120.0 and retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0 - 30) == 30.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0 + 30) == 0.0


def test_a_cache_answering_503_is_given_up_for_the_build_not_asked_per_action(tmp_path) -> None:
    with Server(lambda r: Answer(503, [("Retry-After", "0"), ("Content-Length", "0")])) as s:
        warnings: list[str] = []
        cache = RemoteCache(Registry.parse(s.host), LocalStore(tmp_path / "store"), warn=warnings.append)
        assert cache.has("sha256:" + "c" * 64, "spec-snapshot") is False
        asked = len(s.requests)
        assert cache.has("sha256:" + "d" * 64, "spec-snapshot") is False
        assert len(s.requests) == asked == 4  # one request and its 3 retries, then none
    assert len(warnings) == 1 and "HTTP 503" in warnings[0] and "not asking it again" in warnings[0], warnings


def test_publish_to_a_registry_that_drips_stops_at_its_overall_deadline(tmp_path, capsys) -> None:
    """Issue 36: publish had no overall deadline; a registry that drips a byte every half second
    never trips the per-read timeout, and each request could take hours."""
    spec = light_spec(tmp_path / "spec")
    _build(spec, tmp_path / "store", capsys)
    with Server(lambda r: Answer(200, [("Content-Length", "64")], b"x" * 64, drip_s=0.5)) as s:
        done = subprocess.run([sys.executable, "-m", "compiler", "publish", str(spec), "--store",
                               str(tmp_path / "store"), "--registry", s.host, "--commit", "7" * 40],
                              capture_output=True, text=True, timeout=90,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "KILN_PUBLISH_DEADLINE_S": "3"})
    assert done.returncode == 1 and "KILN_PUBLISH_DEADLINE_S" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
