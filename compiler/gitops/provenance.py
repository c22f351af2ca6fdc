"""The provenance of a release: an in-toto Statement v1 whose predicate is SLSA Provenance v1.

Subjects are the release (its OCI manifest digest and the release manifest's own digest) and every
artifact (the digest of its tree manifest, which lists each file by digest). The predicate links
them to the spec: its path in the repository, its digest and the git commit it was built from, and
to the toolchain pins. Pure and deterministic: no times, hosts or paths of this machine; the
statement is signed by `kiln publish --sign-key/--keyless` (compiler/gitops/signing.py).

Field names: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md and
https://slsa.dev/spec/v1.0/provenance.
"""

from __future__ import annotations

import json

from compiler import __version__
from compiler.store.canonical import pretty_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:kiln:build:v1"


def _hex(digest: str) -> dict:
    return {"sha256": digest.removeprefix("sha256:")}


def input_dependencies(graph) -> list[dict]:
    """Every file the build read (compiler/graph: each action's inputs, by digest), named by the spec
    field that names it, and every Hugging Face source by its commit: SLSA resolvedDependencies."""
    seen: dict[tuple[str, str], dict] = {}
    for aid in graph.order:
        action = graph.actions[aid]
        for role, digest in sorted(action.inputs.items()):
            field = action.input_paths.get(role, f"{aid}:{role}")
            name = role.split(":", 1)[-1]
            name = f"{field}:{name}" if "/" in name else field  # a directory's file, or the file itself
            seen.setdefault((name, digest), {"name": name, "digest": _hex(digest)})
        params = action.params_json
        if isinstance(params, dict) and params.get("huggingface") and params.get("revision"):
            uri = f"https://huggingface.co/{params['huggingface']}"
            seen.setdefault((uri, params["revision"]), {"uri": uri, "digest": {"gitCommit": params["revision"]}})
    return [seen[k] for k in sorted(seen)]


def statement(release: bytes, release_ref: str, release_oci_digest: str, spec_path: str, commit: str, *,
              dirty: bool = False, inputs: list[dict] = ()) -> bytes:
    """release: the release manifest bytes; release_ref: where it was pushed ("<repo>:<commit>").
    `dirty`: built from uncommitted changes on top of `commit`, so the commit is no dependency: the
    statement says so and names the commit only as the base."""
    doc = json.loads(release)
    from compiler.store.local import sha256_bytes

    subjects = [{"name": release_ref, "digest": _hex(release_oci_digest)},
                {"name": "release.json", "digest": _hex(sha256_bytes(release))}]
    subjects += [{"name": a["id"], "digest": _hex(a["tree"]),
                  "annotations": {"kind": a["kind"], "key": a["key"]}} for a in doc["artifacts"]]
    for host, image in sorted((doc.get("images") or {}).items()):  # serving images, pushed by digest
        subjects.append({"name": image["reference"].split("@")[0], "digest": _hex(image["digest"]),
                         "annotations": {"host": host}})
    for model, image in sorted((doc.get("weights") or {}).items()):  # weights images (image volumes)
        subjects.append({"name": image["reference"].split("@")[0], "digest": _hex(image["digest"]),
                         "annotations": {"model": model}})
    deps = [] if dirty else [{"uri": f"git+{spec_path}@{commit}", "digest": {"gitCommit": commit}}]
    image = doc["toolchain"].get("triton_image")
    if image and "@sha256:" in image:
        deps.append({"uri": f"oci://{image.split('@')[0]}", "digest": _hex(image.split("@")[1])})
    deps += inputs
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"spec": {"path": spec_path, "digest": doc["spec"]["digest"],
                                            "name": doc["spec"]["name"]},
                                   "commit": commit,
                                   **({"uncommittedChanges": True} if dirty else {})},
            "internalParameters": {"toolchain": doc["toolchain"], "target": doc["spec"]["target"]},
            "resolvedDependencies": deps,
        },
        "runDetails": {"builder": {"id": f"urn:kiln:builder:{__version__}"}},
    }
    return pretty_json({"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
                        "predicate": predicate})
