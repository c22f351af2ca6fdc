"""A hostile or broken registry cache never writes outside the store, leaks a password or stalls a
build (issue 17, items 1, 3 and 9). Against a real registry (Debian docker-registry on 127.0.0.1)
and a real socket that accepts connections and never answers."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from compiler.build import build_spec
from compiler.cli import main
from compiler.gitops import artifacts as oa
from compiler.gitops.oci import Client, Registry
from compiler.store.canonical import canonical_json
from compiler.store.local import LocalStore, sha256_bytes
from tests.test_gitops_registry import _build, _executed, _publish, light_spec

ROOT = Path(__file__).resolve().parents[1]


def _push_artifact(client: Client, repo: str, kind: str, key: str, files: dict[str, bytes]) -> None:
    """An artifact as `kiln publish` lays it out, but with whatever paths its tree names."""
    entries = []
    for path, data in files.items():
        digest = sha256_bytes(data)
        client.push_blob(repo, digest, len(data), data)
        entries.append({"path": path, "digest": digest, "size": len(data), "executable": False})
    tree = canonical_json({"kind": "kiln.tree/v1", "files": entries})
    client.push_blob(repo, sha256_bytes(tree), len(tree), tree)
    client.put_manifest(repo, oa.artifact_tag(kind, key), oa.artifact_manifest(kind, 1, key, tree, [
        type("F", (), {"digest": e["digest"], "size": e["size"], "path": e["path"]}) for e in entries]))


def test_a_cached_artifact_whose_tree_leaves_the_store_is_refused_and_built_here(tmp_path, registry, capsys) -> None:
    spec = light_spec(tmp_path / "spec")
    target = Registry.parse(f"{registry.host}/hostile")
    graph = build_spec(spec, LocalStore(tmp_path / "plan-store")).graph
    aid = "tokenizer/tiny"  # triton-repo/dev-h100 materializes it
    escape = Path("/tmp") / f"kiln-cache-escape-{uuid.uuid4().hex}.txt"
    hostile = "../" * 40 + escape.relative_to("/").as_posix()
    _push_artifact(Client(target), target.repo(oa.ARTIFACTS_REPO), "tokenizer", graph.keys[aid],
                   {"tokenizer.json": b"{}", hostile: b"owned\n"})
    try:
        code = main(["build", str(spec), "--store", str(tmp_path / "B"), "-q", "--cache", str(target)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert not escape.exists(), "a registry's tree wrote outside the store"
        refusals = [line for line in captured.err.splitlines() if aid in line]
        assert len(refusals) == 1 and str(target) in refusals[0] and "refused" in refusals[0] \
            and "building it here" in refusals[0], captured.err
        assert _executed(captured.out) >= 1
        assert main(["store", "verify", "--store", str(tmp_path / "B")]) == 0
    finally:
        escape.unlink(missing_ok=True)


def test_credentials_in_a_registry_reference_are_used_and_never_printed(tmp_path, capsys, monkeypatch) -> None:
    import warnings

    from tests.services import Registry as RegistryProcess
    from tests.services import free_port

    monkeypatch.delenv("KILN_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("KILN_REGISTRY_PASSWORD", raising=False)
    spec = light_spec(tmp_path / "spec")
    # nothing listens: every message about the cache names the registry, none shows the password
    code = main(["build", str(spec), "--store", str(tmp_path / "A"), "-q", "--cache",
                 f"kiln:hunter2pw@127.0.0.1:{free_port()}/team"])
    err = capsys.readouterr().err
    assert code == 0 and "cannot reach 127.0.0.1" in err and "hunter2pw" not in err, err
    code = main(["build", str(spec), "--store", str(tmp_path / "A"), "-q", "--cache", "kiln:hunter2pw@bad host"])
    err = capsys.readouterr().err
    assert code == 2 and "not a registry reference" in err and "hunter2pw" not in err, err

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # the standard library's bcrypt (libxcrypt), for the registry's htpasswd file
    # bcrypt at its lowest cost (2^4 rounds): the registry checks the password on every request
    salt = crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)
    secured = RegistryProcess(htpasswd="kiln:" + crypt.crypt("hunter2pw", salt))
    try:
        code = main(["publish", str(spec), "--store", str(tmp_path / "A"), "--commit", "6" * 40,
                     "--registry", f"kiln:wrongpw@{secured.host}/private"])
        err = capsys.readouterr().err
        assert code == 1 and "rejected the credentials" in err and "wrongpw" not in err, err
        out = _publish(spec, tmp_path / "A", f"kiln:hunter2pw@{secured.host}/private", capsys, "--commit", "6" * 40)
        assert "hunter2pw" not in out and f"{secured.host}/private" in out
        code = main(["build", str(spec), "--store", str(tmp_path / "B"), "-q", "--cache",
                     f"kiln:hunter2pw@{secured.host}/private"])
        captured = capsys.readouterr()
        assert code == 0 and _executed(captured.out) == 0, captured.err
        assert "hunter2pw" not in captured.out + captured.err
    finally:
        secured.stop()


class _Silent:
    """A TCP listener that accepts every connection and never answers (a hung registry)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.held.append(conn)
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for c in self.held:
            c.close()
        self.sock.close()


def test_a_registry_that_never_answers_costs_one_timeout_and_one_warning(tmp_path) -> None:
    spec = light_spec(tmp_path / "spec")
    silent = _Silent()
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KILN_CACHE_TIMEOUT_S": "2", "KILN_BUILDER_HAS": ""}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "compiler", "build", str(spec), "--store", str(tmp_path / "A"),
                               "-q", "--cache", f"127.0.0.1:{silent.port}/hung"], capture_output=True, text=True,
                              env=env, timeout=90)
        took = time.monotonic() - start
    finally:
        silent.close()
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "did not answer within 2s" in warnings[0] and "not asking it again" in warnings[0], \
        proc.stderr
    assert took < 30, f"{took:.0f}s"
    assert re.search(r"\d+ executed", proc.stdout)


def test_a_cache_gives_up_once_its_time_budget_is_spent(tmp_path, registry, capsys) -> None:
    from compiler.gitops.cache import RemoteCache

    spec = light_spec(tmp_path / "spec")
    warnings: list[str] = []
    store = LocalStore(tmp_path / "A")
    cache = RemoteCache(Registry.parse(f"{registry.host}/budget"), store, warn=warnings.append, budget=1e-9)
    outcome = build_spec(spec, store, remote=cache)
    assert not outcome.failed and outcome.executed
    assert len(warnings) == 1 and "KILN_CACHE_BUDGET_S" in warnings[0], warnings
    json.dumps(warnings)


def test_redact_masks_credentials_and_leaves_image_references_alone(monkeypatch) -> None:
    from compiler.gitops.oci import redact

    monkeypatch.setenv("KILN_REGISTRY_PASSWORD", "from-the-env")
    assert redact("GET http://bob:pw1@127.0.0.1:5000/v2/x: denied") == "GET http://***@127.0.0.1:5000/v2/x: denied"
    assert redact("cache bob:pw1@ghcr.io/team: down") == "cache ***@ghcr.io/team: down"
    assert redact("the registry said: bad password from-the-env") == "the registry said: bad password ***"
    image = "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:" + "1" * 64
    assert redact(f"base {image}") == f"base {image}"
    assert redact("user@host") == "user@host"
