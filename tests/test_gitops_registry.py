"""`kiln publish` and `kiln build --cache` against a real registry (Debian docker-registry on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from compiler.build import build_spec
from compiler.cli import main
from compiler.gitops import artifacts as oa
from compiler.gitops.cache import RemoteCache
from compiler.gitops.oci import Client, Registry
from compiler.store.local import LocalStore
from tests.gitrepo import GitRepo

QUICKSTART = Path(__file__).parents[1] / "examples" / "quickstart"


def light_spec(dest: Path) -> Path:
    """The quickstart without quantization: every action runs in a moment and needs nothing."""
    shutil.copytree(QUICKSTART, dest)
    spec = dest / "kiln.yaml"
    text = re.sub(r"    quantization:\n(?:      .*\n)+", "", spec.read_text(encoding="utf-8"))
    spec.write_text(text, encoding="utf-8")
    return spec


def _build(spec: Path, store: Path, capsys, *extra: str) -> str:
    assert main(["build", str(spec), "--store", str(store), "-q", *extra]) == 0
    return capsys.readouterr().out


def _publish(spec: Path, store: Path, target: str | None, capsys, *extra: str) -> str:
    code = main(["publish", str(spec), "--store", str(store), *(["--registry", target] if target else []), *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def _executed(build_output: str) -> int:
    return int(re.search(r"(\d+) executed", build_output).group(1))


def test_a_fresh_store_builds_from_the_registry_cache_without_executing_anything(tmp_path, registry, capsys) -> None:
    spec = light_spec(tmp_path / "spec")
    target = f"{registry.host}/acceptance"
    out_a = _build(spec, tmp_path / "A", capsys, "--manifest", str(tmp_path / "a.json"))
    assert _executed(out_a) > 0
    assert "0 already present" in _publish(spec, tmp_path / "A", target, capsys, "--commit", "1" * 40)

    out_b = _build(spec, tmp_path / "B", capsys, "--cache", target, "--manifest", str(tmp_path / "b.json"))
    assert _executed(out_b) == 0
    total = len(json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["artifacts"])
    assert f"0 executed, 0 cached, {total} fetched" in out_b  # fetched from the registry, not the store's
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert main(["store", "verify", "--store", str(tmp_path / "B")]) == 0


def test_git_revert_rebuilds_and_republishes_nothing_and_tags_the_earlier_release(tmp_path, registry, capsys) -> None:
    repo = GitRepo(tmp_path / "repo")
    light_spec(repo.root / "deploy")
    spec, store, target = repo.root / "deploy" / "kiln.yaml", tmp_path / "store", f"{registry.host}/e2e"
    commits = []
    for old, new in [(None, None), ("max_queue_size: 16", "max_queue_size: 32"),
                     ("graphics_mhz: 1755", "graphics_mhz: 1700")]:
        if old is not None:
            repo.edit("deploy/kiln.yaml", old, new)
        commits.append(repo.commit(f"change {len(commits)}"))
        _build(spec, store, capsys)
        _publish(spec, store, target, capsys)
    repo.git("revert", "--no-edit", "HEAD")
    revert = repo.git("rev-parse", "HEAD")

    assert _executed(_build(spec, store, capsys)) == 0
    out = _publish(spec, store, target, capsys)
    assert "0 artifact(s) pushed" in out

    client = Client(Registry.parse(target))
    digests = {c: client.manifest_digest("e2e/quickstart", c) for c in commits + [revert]}
    assert digests[revert] == digests[commits[1]]
    assert len({digests[c] for c in commits}) == 3
    assert f"e2e/quickstart:{revert}@{digests[revert]}" in out


def test_artifacts_are_oras_style_and_republishing_gives_identical_digests(tmp_path, registry, capsys) -> None:
    spec = light_spec(tmp_path / "spec")
    store = LocalStore(tmp_path / "store")
    outcome = build_spec(spec, store)
    for ns in ("one", "two"):
        _publish(spec, store.root, f"{registry.host}/{ns}", capsys, "--commit", "2" * 40)
    client = Client(Registry.parse(registry.host))
    for aid in outcome.graph.order:
        kind, key = outcome.graph.actions[aid].kind, outcome.graph.keys[aid]
        tag = oa.artifact_tag(kind, key)
        one, two = client.get_manifest("one/kiln-artifacts", tag), client.get_manifest("two/kiln-artifacts", tag)
        assert one is not None and one == two
        doc = json.loads(one[0])
        assert doc["artifactType"] == f"application/vnd.kiln.{kind}.v1"
        assert doc["annotations"][oa.A_KEY] == key
        assert doc["config"]["digest"] == outcome.results[aid].tree  # the tree digest of the release manifest
        titles = sorted(layer["annotations"][oa.TITLE] for layer in doc["layers"])
        assert titles == sorted(e.path for e in store.tree(outcome.results[aid].tree))
    release = json.loads(client.get_manifest("one/quickstart", "2" * 40)[0])
    assert release["annotations"][oa.A_SPEC_DIGEST].startswith("sha256:")
    layer = release["layers"][0]
    assert client.read_blob("one/quickstart", layer["digest"], layer["size"]) == outcome.manifest


def test_the_provenance_statement_links_spec_commit_and_every_artifact(tmp_path, registry, capsys) -> None:
    repo = GitRepo(tmp_path / "repo")
    light_spec(repo.root / "deploy")
    commit = repo.commit("one")
    spec, store = repo.root / "deploy" / "kiln.yaml", LocalStore(tmp_path / "store")
    outcome = build_spec(spec, store)
    _publish(spec, store.root, f"{registry.host}/prov", capsys, "--provenance", str(tmp_path / "prov.json"))
    statement = json.loads((tmp_path / "prov.json").read_text(encoding="utf-8"))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    for aid, result in outcome.results.items():
        assert subjects[aid] == result.tree.removeprefix("sha256:")
    client = Client(Registry.parse(f"{registry.host}/prov"))
    release_digest = client.manifest_digest("prov/quickstart", commit)
    assert subjects[f"{registry.host}/prov/quickstart:{commit}"] == release_digest.removeprefix("sha256:")
    build = statement["predicate"]["buildDefinition"]
    assert build["externalParameters"]["commit"] == commit
    assert build["externalParameters"]["spec"]["path"] == "deploy/kiln.yaml"
    assert build["externalParameters"]["spec"]["digest"] == json.loads(outcome.manifest)["spec"]["digest"]
    assert {"gitCommit": commit} in [d["digest"] for d in build["resolvedDependencies"]]
    # every file the build read, by the spec field that names it
    inputs = {d["name"]: d["digest"]["sha256"] for d in build["resolvedDependencies"] if "name" in d}
    for action in outcome.graph.actions.values():
        for role, digest in action.inputs.items():
            assert digest.removeprefix("sha256:") in inputs.values(), (action.id, role)
    assert "models.tiny.source.path:source/model.safetensors" in inputs
    # pushed next to the release, and the same bytes as written locally
    pushed = json.loads(client.get_manifest("prov/quickstart", f"{commit}.provenance")[0])
    assert pushed["subject"]["digest"] == release_digest
    layer = pushed["layers"][0]
    assert client.read_blob("prov/quickstart", layer["digest"], layer["size"]) == (tmp_path / "prov.json").read_bytes()


def test_a_bad_or_absent_cache_falls_back_to_building(tmp_path, registry, capsys) -> None:
    from tests.services import free_port

    spec = light_spec(tmp_path / "spec")
    assert main(["build", str(spec), "--store", str(tmp_path / "A"), "-q", "--only", "host-script",
                 "--allow-partial", "--cache", f"127.0.0.1:{free_port()}/nothing-listens"]) == 0
    out = capsys.readouterr()
    assert _executed(out.out) > 0
    # one warning for a registry that is down, not one per action (nor for those left out by --only)
    warnings = [line for line in out.err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cannot reach" in warnings[0] and "not asking it again" in warnings[0], out.err
    _build(spec, tmp_path / "A", capsys)
    # an artifact whose blob the registry lost: the fetch fails verification, the action is built here
    store_a = LocalStore(tmp_path / "A")
    target = Registry.parse(f"{registry.host}/broken")
    _publish(spec, store_a.root, str(target), capsys, "--artifacts-only")
    graph = build_spec(spec, store_a).graph
    aid = "spec-snapshot"
    client = Client(target)
    doc = json.loads(client.get_manifest(target.repo(oa.ARTIFACTS_REPO),
                                         oa.artifact_tag("spec-snapshot", graph.keys[aid]))[0])
    layer = doc["layers"][0]["digest"]
    blob_dir = registry.dir / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / layer[7:9] / layer[7:]
    (blob_dir / "data").write_bytes(b"not the artifact")
    warnings: list[str] = []
    store_c = LocalStore(tmp_path / "C")
    outcome = build_spec(spec, store_c, remote=RemoteCache(target, store_c, warn=warnings.append))
    assert outcome.results[aid].status == "built"
    assert {r.status for a, r in outcome.results.items() if a != aid} == {"cached"}
    # refused by its size (read no further than the tree says) or by its digest
    assert any(aid in w and ("does not match" in w or "descriptor's" in w) for w in warnings), warnings


def test_publish_needs_a_complete_build_and_a_target(tmp_path, registry, capsys) -> None:
    spec = light_spec(tmp_path / "spec")
    # a --store that holds no store is a usage error (and is not created), as for the store commands
    assert main(["publish", str(spec), "--store", str(tmp_path / "empty"), "--registry", registry.host,
                 "--commit", "3" * 40]) == 2
    assert "no Kiln store" in capsys.readouterr().err and not (tmp_path / "empty").exists()
    LocalStore(tmp_path / "empty")  # a store without this spec's artifacts
    assert main(["publish", str(spec), "--store", str(tmp_path / "empty"), "--registry", registry.host,
                 "--commit", "3" * 40]) == 1
    assert "run `kiln build` first" in capsys.readouterr().err
    _build(spec, tmp_path / "A", capsys)
    assert main(["publish", str(spec), "--store", str(tmp_path / "A"), "--commit", "3" * 40]) == 1
    assert "no registry to publish to" in capsys.readouterr().err
    assert main(["publish", str(spec), "--store", str(tmp_path / "A"), "--registry", "127.0.0.1:1/Bad Name",
                 "--commit", "3" * 40]) == 1
    assert "not a registry reference" in capsys.readouterr().err


def test_the_job_matrix_leaves_out_what_the_registry_cache_has(tmp_path, registry, capsys, monkeypatch) -> None:
    from compiler.build import plan_spec
    from compiler.gitops.publish import push_artifact

    monkeypatch.setenv("KILN_BUILDER_HAS", "torch")  # a runner without network: the HF models wait
    spec_dir = tmp_path / "spec"
    shutil.copytree(Path(__file__).parent / "golden" / "plan" / "calibration-and-mig" / "spec", spec_dir)
    spec, store = spec_dir / "kiln.yaml", LocalStore(tmp_path / "store")
    target = Registry.parse(f"{registry.host}/matrix")

    def matrix() -> list[str]:
        assert main(["plan", str(spec), "--store", str(store.root), "--matrix", "--cache", str(target)]) == 0
        return [e["name"] for e in json.loads(capsys.readouterr().out)["include"]]

    tokenizers = ["tokenizer/chat", "tokenizer/coder", "tokenizer/intent"]  # fetched from the hub too
    assert matrix() == ["quantize/chat", "quantize/coder", "quantize/intent"] + tokenizers
    # an artifact published under quantize/coder's key (by a runner that could build it)
    graph = plan_spec(spec, store).graph
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "config.json").write_text("{}", encoding="utf-8")
    push_artifact(Client(target), store, target.repo(oa.ARTIFACTS_REPO), "quantize", 1, graph.keys["quantize/coder"],
                  store.put_tree(tmp_path / "tree"))
    assert matrix() == ["quantize/chat", "quantize/intent"] + tokenizers


def test_the_spec_names_the_default_target_and_an_unreachable_one_is_a_clear_error(tmp_path, registry,
                                                                                    capsys) -> None:
    from tests.services import free_port

    spec = light_spec(tmp_path / "spec")
    with open(spec, "a", encoding="utf-8") as f:
        f.write(f"publish: {{registry: {registry.host}/from-spec}}\n")
    _build(spec, tmp_path / "A", capsys)
    assert "from-spec/quickstart:" + "4" * 40 in _publish(spec, tmp_path / "A", None, capsys, "--commit", "4" * 40)
    code = main(["publish", str(spec), "--store", str(tmp_path / "A"), "--commit", "4" * 40,
                 "--registry", f"127.0.0.1:{free_port()}/gone"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot reach" in err and "Traceback" not in err


def test_a_registry_that_asks_for_credentials_gets_them_from_the_environment(tmp_path, capsys, monkeypatch) -> None:
    import warnings

    from tests.services import Registry as RegistryProcess

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # the standard library's bcrypt (libxcrypt), for the registry's htpasswd file
    # bcrypt at its lowest cost (2^4 rounds): the registry checks the password on every request, and
    # the default 2^12 made this test the slowest of the module; the authentication path is the same
    salt = crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)
    secured = RegistryProcess(htpasswd="kiln:" + crypt.crypt("s3cret", salt))
    try:
        spec = light_spec(tmp_path / "spec")
        target = f"{secured.host}/private"
        _build(spec, tmp_path / "A", capsys)
        monkeypatch.delenv("KILN_REGISTRY_USERNAME", raising=False)
        monkeypatch.delenv("KILN_REGISTRY_PASSWORD", raising=False)
        assert main(["publish", str(spec), "--store", str(tmp_path / "A"), "--registry", target,
                     "--commit", "5" * 40]) == 1
        assert "needs credentials: set KILN_REGISTRY_USERNAME" in capsys.readouterr().err
        monkeypatch.setenv("KILN_REGISTRY_USERNAME", "kiln")
        monkeypatch.setenv("KILN_REGISTRY_PASSWORD", "wrong")
        assert main(["publish", str(spec), "--store", str(tmp_path / "A"), "--registry", target,
                     "--commit", "5" * 40]) == 1
        assert "rejected the credentials" in capsys.readouterr().err
        monkeypatch.setenv("KILN_REGISTRY_PASSWORD", "s3cret")
        _publish(spec, tmp_path / "A", target, capsys, "--commit", "5" * 40)
        assert _executed(_build(spec, tmp_path / "B", capsys, "--cache", target)) == 0
    finally:
        secured.stop()


def test_publish_refuses_a_dirty_spec_directory_and_never_moves_the_commit_tag(tmp_path, registry, capsys) -> None:
    repo = GitRepo(tmp_path / "repo")
    light_spec(repo.root / "deploy")
    (repo.root / ".gitignore").write_text("*.log\n", encoding="utf-8")
    spec, target = repo.root / "deploy" / "kiln.yaml", f"{registry.host}/dirty"
    store = repo.root / "deploy" / ".kiln" / "store"  # Kiln's own outputs do not make the directory dirty
    head = repo.commit("spec")
    _build(spec, store, capsys)
    _publish(spec, store, target, capsys)
    client = Client(Registry.parse(target))
    tagged = client.manifest_digest("dirty/quickstart", head)
    assert tagged is not None

    (repo.root / "deploy" / "notes.log").write_text("ignored by git\n", encoding="utf-8")
    _publish(spec, store, target, capsys)  # ignored files do not count either; same content: a no-op
    repo.edit("deploy/kiln.yaml", "max_queue_size: 16", "max_queue_size: 32")  # not committed
    _build(spec, store, capsys)
    assert main(["publish", str(spec), "--store", str(store), "--registry", target]) == 1
    err = capsys.readouterr().err
    assert f"differs from commit {head[:12]} (deploy/kiln.yaml)" in err and "--allow-dirty" in err
    assert client.manifest_digest("dirty/quickstart", head) == tagged
    # an explicit --commit is checked the same way
    assert main(["publish", str(spec), "--store", str(store), "--registry", target, "--commit", head]) == 1
    assert "differs from commit" in capsys.readouterr().err

    out = _publish(spec, store, target, capsys, "--allow-dirty", "--provenance", str(tmp_path / "prov.json"))
    ref = re.search(r"release (\S+):(dirty-[0-9a-f]{12}-[0-9a-f]{16})@(sha256:[0-9a-f]{64})", out)
    assert ref and ref.group(2).startswith(f"dirty-{head[:12]}-"), out
    assert client.manifest_digest("dirty/quickstart", ref.group(2)) == ref.group(3) != tagged
    assert client.manifest_digest("dirty/quickstart", head) == tagged  # the commit's tag did not move
    statement = json.loads((tmp_path / "prov.json").read_text(encoding="utf-8"))
    params = statement["predicate"]["buildDefinition"]["externalParameters"]
    assert params["commit"] == head and params["uncommittedChanges"] is True
    assert not [d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"] if "gitCommit" in d["digest"]]

    repo.git("checkout", "--", "deploy/kiln.yaml")
    (repo.root / "deploy" / "extra.jsonl").write_text("{}\n", encoding="utf-8")  # untracked, not ignored
    assert main(["publish", str(spec), "--store", str(store), "--registry", target]) == 1
    assert "(deploy/extra.jsonl)" in capsys.readouterr().err


def test_an_existing_commit_tag_is_never_moved_to_other_content(tmp_path, registry, capsys) -> None:
    spec = light_spec(tmp_path / "spec")  # not in git: --commit is taken on trust, the registry is checked
    target, commit = f"{registry.host}/moved", "6" * 40
    _build(spec, tmp_path / "A", capsys)
    _publish(spec, tmp_path / "A", target, capsys, "--commit", commit)
    _publish(spec, tmp_path / "A", target, capsys, "--commit", commit)  # the same release again: fine
    client = Client(Registry.parse(target))
    tagged = client.manifest_digest("moved/quickstart", commit)
    spec.write_text(spec.read_text(encoding="utf-8").replace("max_queue_size: 16", "max_queue_size: 32"),
                    encoding="utf-8")
    graph = build_spec(spec, LocalStore(tmp_path / "A")).graph
    capsys.readouterr()
    assert main(["publish", str(spec), "--store", str(tmp_path / "A"), "--registry", target, "--commit", commit]) == 1
    err = capsys.readouterr().err
    assert f"moved/quickstart:{commit} already names other content ({tagged})" in err
    assert client.manifest_digest("moved/quickstart", commit) == tagged
    # refused before anything was pushed: the new spec snapshot is not in the registry
    tag = oa.artifact_tag("spec-snapshot", graph.keys["spec-snapshot"])
    assert client.manifest_digest("moved/kiln-artifacts", tag) is None
