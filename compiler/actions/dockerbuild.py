"""Docker Engine calls of the image action, through the Docker SDK: send a build context, build,
push, and read what the daemon reports. Nothing here knows about specs.

The daemon's builder is the classic one: the SDK has no BuildKit session, and Debian bookworm's
docker.io (20.10) ships no buildx, so SOURCE_DATE_EPOCH is not honoured. What the builder still
gives deterministically is layer content: the context tar built here has fixed times, owners and
modes, and COPY keeps them (see image_context for the layer layout that makes parents fixed too).
The image config is the builder's only non-deterministic part (build times, the build container's
ID, the daemon version); normalize() rewrites it with fixed times and loads it back, so the image
ID is a function of the layers and settings alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

FIXED_MTIME = 0  # every entry of a context tar; COPY carries it into the layer


class DockerError(RuntimeError):
    """The daemon is unreachable or refused a build or push; the message is one line for the user."""


def connect(timeout: int = 6 * 3600):
    """A client for the daemon that DOCKER_HOST (or the default socket) names, checked with a ping;
    the caller closes it (its connection pool holds sockets). The timeout bounds one socket read: a COPY of a large checkpoint prints nothing for minutes."""
    try:
        import docker
    except ImportError:  # a dependency of the package, but say so plainly if it is missing
        raise DockerError("the Docker SDK (Python package `docker`) is not installed") from None
    try:
        with contextlib.closing(docker.from_env(timeout=10)) as probe:  # fail fast where nothing answers
            probe.ping()
        client = docker.from_env(timeout=timeout)
    except Exception as e:  # DockerException, connection errors: all mean "no daemon here"
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerError(f"no Docker daemon reachable at {where} ({_first_line(e)}); the image step needs one, "
                          "its build context is in the image-context artifact") from None
    return client


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def write_context_tar(root: Path, names: list[str], dest: IO[bytes]) -> str:
    """Write the files under root/<name> for each name as a tar (write_entries_tar); its sha256."""
    return write_entries_tar(_tree_entries(root, names), dest)


def _tree_entries(root: Path, names: list[str]) -> Iterator[tuple[str, Path | None]]:
    """(name in the tar, file or None for a directory) of each root/<name> and everything under it, sorted."""
    for name in sorted(names):
        top = root / name
        for p in [top] + (sorted(top.rglob("*")) if top.is_dir() else []):
            yield p.relative_to(root).as_posix(), None if p.is_dir() else p


def write_entries_tar(entries: Iterable[tuple[str, "Path | bytes | None"]], dest: IO[bytes]) -> str:
    """Write (name, source) entries as a tar with fixed metadata (mtime, owner, modes 0o755 for a
    directory or an executable, else 0o644), so that the same files give the same bytes: a Path is a
    file read from there, bytes a file's content, None a directory; its sha256."""
    hasher = _HashingWriter(dest)
    with tarfile.open(fileobj=hasher, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # a stream: no seeking
        for name, source in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
            if source is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(source, bytes):
                info.size, info.mode = len(source), 0o644
                tar.addfile(info, io.BytesIO(source))
            else:
                info.size = source.stat().st_size
                info.mode = 0o755 if source.stat().st_mode & 0o111 else 0o644
                with source.open("rb") as f:
                    tar.addfile(info, f)
    return "sha256:" + hasher.hash.hexdigest()


class _HashingWriter(io.RawIOBase):
    def __init__(self, dest: IO[bytes]) -> None:
        self.dest, self.hash = dest, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.hash.update(b)
        return self.dest.write(b)


def build(client, context: IO[bytes], tag: str, log, nocache: bool = False) -> str:
    """Build a context tar (positioned at its start); the image ID."""
    image_id = None
    try:
        for chunk in client.api.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                                      decode=True, pull=False, nocache=nocache):
            if "stream" in chunk:
                text = chunk["stream"].rstrip()
                if text:
                    log.info("build: %s", text)
            if "error" in chunk:
                raise DockerError(f"docker build failed: {chunk['error'].strip().splitlines()[0]}")
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    except DockerError:
        raise
    except Exception as e:
        raise DockerError(f"docker build failed: {_first_line(e)}") from None
    if image_id is None:
        raise DockerError("docker build ended without an image ID")
    return image_id


def build_dir(client, root: Path, names: list[str], tag: str, log) -> tuple[str, str]:
    """Build the context made of root/<name>...; (image ID, sha256 of the context tar sent)."""
    with tempfile.TemporaryFile() as f:
        digest = write_context_tar(root, names, f)
        f.seek(0)
        return build(client, f, tag, log), digest


def build_dockerfile(client, dockerfile: str, tag: str, log) -> str:
    """Build a context that holds only a Dockerfile (e.g. labels on top of an existing image)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mtime, info.mode = len(data), FIXED_MTIME, 0o644
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return build(client, buf, tag, log)


def pushed_entry(tree, output: str) -> dict | None:
    """What the release manifest says of an image an action pushed: its reference, digest and content
    digest, from the record `output` the action wrote; None where the action has not run."""
    data = tree.read(output)
    if data is None:
        return None
    doc = json.loads(data)
    return {"reference": doc["reference"], "digest": doc["digest"], "content_digest": doc["content_digest"]}


@dataclass
class PushResult:
    digest: str  # manifest digest the registry stored
    pushed: list[str] = field(default_factory=list)  # layer IDs (short) uploaded
    existing: list[str] = field(default_factory=list)  # layer IDs the registry already had


def push(client, repository: str, tag: str, log) -> PushResult:
    digest = None
    pushed: list[str] = []
    existing: list[str] = []
    try:
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise DockerError(f"docker push {repository}:{tag} failed: {chunk['error'].strip().splitlines()[0]}")
            status = chunk.get("status", "")
            if status == "Pushed":
                pushed.append(chunk.get("id", ""))
            elif status == "Layer already exists" or status.startswith("Mounted from"):
                existing.append(chunk.get("id", ""))
            if status and status not in ("Pushing", "Preparing", "Waiting"):
                log.info("push: %s%s", (chunk.get("id", "") + ": ") if chunk.get("id") else "", status)
            aux = chunk.get("aux") or {}
            if "Digest" in aux:
                digest = aux["Digest"]
    except DockerError:
        raise
    except Exception as e:
        raise DockerError(f"docker push {repository}:{tag} failed: {_first_line(e)}") from None
    if digest is None:
        raise DockerError(f"docker push {repository}:{tag} reported no digest")
    return PushResult(digest, pushed, existing)


FIXED_CREATED = "1970-01-01T00:00:00Z"  # the SOURCE_DATE_EPOCH=0 convention


def normalize(client, image_id: str, base: str | None, tag: str, log) -> str:
    """Load a copy of the image whose config has fixed build times and no build-machine fields; its
    image ID (the sha256 of that config). The layers are already on the daemon, so the tar loaded
    holds only the config and a manifest naming the layers (the loader reads a layer file only for
    a layer it lacks). Entries of the base's history keep their own times (to the second); `base`
    None: built FROM scratch, every entry is the build's."""
    attrs = client.api.inspect_image(image_id)
    history = list(reversed(client.api.history(image_id)))
    n_base = len(_history(client, base)) if base is not None else 0
    diff_ids = attrs["RootFS"]["Layers"]
    entries = []
    for i, h in enumerate(history):
        entry: dict = {"created": _rfc3339(h["Created"]) if i < n_base else FIXED_CREATED,
                       "created_by": h["CreatedBy"]}
        if h.get("Comment"):
            entry["comment"] = h["Comment"]
        # The history API has no empty_layer flag: a metadata step of size 0 had none. Checked
        # against the layer count below (a zero-byte RUN layer would be miscounted).
        if h["Size"] == 0 and not _makes_layer(h["CreatedBy"]):
            entry["empty_layer"] = True
        entries.append(entry)
    if sum(1 for e in entries if not e.get("empty_layer")) != len(diff_ids):
        log.info("normalize: history does not match the %d layers; the image keeps its build times", len(diff_ids))
        return image_id
    config = {
        "architecture": attrs["Architecture"],
        "os": attrs["Os"],
        "config": dict(attrs["Config"], Image=""),  # Image: the build's parent ID, itself time-dependent
        "created": FIXED_CREATED,
        "history": entries,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    if attrs.get("Variant"):
        config["variant"] = attrs["Variant"]
    raw = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_hex = hashlib.sha256(raw).hexdigest()
    manifest = [{"Config": f"{config_hex}.json", "RepoTags": [tag],
                 "Layers": [f"{i}/layer.tar" for i in range(len(diff_ids))]}]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((f"{config_hex}.json", raw), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), FIXED_MTIME, 0o644
            tar.addfile(info, io.BytesIO(data))
    try:
        client.images.load(buf.getvalue())
    except Exception as e:
        raise DockerError(f"docker load of the normalized image config failed: {_first_line(e)}") from None
    log.info("normalized image config: %s (built as %s)", config_hex, image_id)
    return f"sha256:{config_hex}"


METADATA_STEPS = frozenset({"ARG", "CMD", "ENTRYPOINT", "ENV", "EXPOSE", "HEALTHCHECK", "LABEL", "MAINTAINER",
                            "ONBUILD", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"})


def _history(client, ref: str) -> list:
    """An image's history; pulled first when the daemon no longer has it (a cached content image
    may outlive its base there)."""
    try:
        return client.api.history(ref)
    except Exception:
        try:
            client.images.pull(ref)
            return client.api.history(ref)
        except Exception as e:
            raise DockerError(f"cannot read the history of the base image {ref}: {_first_line(e)}") from None


def _makes_layer(created_by: str) -> bool:
    """Whether a history step can have made a layer: anything but a metadata instruction (classic
    builder: `/bin/sh -c #(nop)  ENV ...`; BuildKit: `ENV ...`)."""
    step = created_by.split("#(nop)", 1)[1] if "#(nop)" in created_by else created_by
    words = step.split()
    return not words or words[0].upper() not in METADATA_STEPS


def _rfc3339(seconds: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
