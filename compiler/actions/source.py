"""Model sources: a local directory (every file's digest in the key) or a Hugging Face repository
pinned to a revision, fetched with huggingface_hub where the network allows and otherwise taken from
a local copy (the Hugging Face cache, or $KILN_MODELS/<owner>/<name>) that must match
`source.digest`. Shared by `quantize` and `model-source`."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path

from compiler.store.canonical import canonical_json

from .base import LowerContext, Params, RunContext

# Files of a Hugging Face model directory that a checkpoint needs (weights, config, tokenizer).
SOURCE_PATTERNS = ("*.json", "*.safetensors", "tokenizer*", "*.model", "*.tiktoken", "merges.txt", "vocab.txt",
                   "*.jinja")
# Copied from the source next to the exported weights (the server reads the tokenizer from there).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json")


class SourceError(Exception):
    pass


class SourceRef(Params):
    """A model's source as an action's parameters: a local directory (whose files are the action's
    inputs, by digest) or a Hugging Face repository pinned to a revision."""

    path: bool = False  # a local directory; its files enter the key as inputs
    huggingface: str | None = None
    revision: str | None = None
    digest: str | None = None  # expected directory_digest of a local copy


def lower_source(ctx: LowerContext, model) -> tuple[SourceRef, dict[str, str], dict[str, str]]:
    """(the `source` params, input digests by role, input paths by role) of one model. A local
    directory enters the key file by file (hashed once per content, cached by size and mtime); a
    Hugging Face source by repository, revision and expected digest."""
    src = model.source
    inputs: dict[str, str] = {}
    files: dict[str, str] = {}
    if src.path is not None:
        base = ctx.input_path(src.path)
        for rel, digest in ctx.tree_digests(src.path).items():
            inputs[f"source/{rel}"] = digest
            files[f"source/{rel}"] = str(base / rel)
        return SourceRef(path=True), inputs, files
    return SourceRef(huggingface=src.huggingface, revision=src.revision, digest=src.digest), inputs, files


def local_copies(source: SourceRef) -> list[tuple[str, Path]]:
    """Where a local copy of a Hugging Face source may be: (description, directory) that exist."""
    repo, revision = source.huggingface, source.revision
    out: list[tuple[str, Path]] = []
    try:
        from huggingface_hub import snapshot_download

        out.append(("the Hugging Face cache", Path(snapshot_download(
            repo_id=repo, revision=revision, allow_patterns=list(SOURCE_PATTERNS), local_files_only=True))))
    except Exception:  # not installed, or nothing cached for this revision
        pass
    if os.environ.get("KILN_MODELS"):
        out.append(("$KILN_MODELS", Path(os.environ["KILN_MODELS"]) / repo))
    return [(where, p) for where, p in out if p.is_dir()]


def source_needs(source: SourceRef, builder) -> list[str]:
    """A Hugging Face source needs the network unless a local copy exists (verified when used)."""
    if source.path or builder.has("network"):
        return []
    return [] if local_copies(source) else ["network"]


def directory_digest(directory: Path) -> str:
    """Digest of a model directory: sha256 over canonical JSON of {relative path: sha256 of the file}
    for the files SOURCE_PATTERNS select (symlinks followed, as in a Hugging Face cache snapshot).
    `source.digest` in a spec is this value."""
    files = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_file() and not any(part.startswith(".") for part in Path(rel).parts) and \
                any(fnmatch.fnmatch(p.name, pat) for pat in SOURCE_PATTERNS):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            files[rel] = "sha256:" + h.hexdigest()
    if not files:
        raise SourceError(f"{directory.name}: no model files (config.json, *.safetensors, tokenizer)")
    return "sha256:" + hashlib.sha256(canonical_json(files)).hexdigest()


def local_source(ctx: RunContext, scratch: Path) -> Path:
    """The source files (each verified against its digest by the executor) under their relative paths."""
    model_dir = scratch / "source"
    for role, path in sorted(ctx.files.items()):
        if role.startswith("source/"):
            dest = model_dir / role[len("source/"):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(Path(path).resolve(), dest)
    if not (model_dir / "config.json").is_file():
        raise SourceError("the model directory has no config.json")
    return model_dir


def fetch_huggingface(source: SourceRef, log) -> Path:
    """A verified local directory for a pinned Hugging Face source: downloaded where the network
    allows, else a local copy (the Hugging Face cache, or $KILN_MODELS/<owner>/<name>) whose
    directory_digest equals `source.digest`."""
    repo, revision, want = source.huggingface, source.revision, source.digest
    problems = []
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        snapshot_download = None
        problems.append("huggingface_hub is not installed")
    if snapshot_download is not None and not os.environ.get("HF_HUB_OFFLINE"):
        try:
            path = Path(snapshot_download(repo_id=repo, revision=revision, allow_patterns=list(SOURCE_PATTERNS)))
            if want is not None and directory_digest(path) != want:
                raise SourceError(f"{repo}@{revision}: the downloaded files do not match source.digest {want}")
            log.info("downloaded %s@%s", repo, revision)
            return path
        except SourceError:
            raise
        except Exception as e:  # no network, no such repo/revision, authentication
            problems.append(f"download failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    found = local_copies(source)
    if not found:
        problems.append("no local copy in the Hugging Face cache or under $KILN_MODELS/" + repo)
    elif want is None:
        problems.append(f"a local copy exists ({found[0][0]}) but the spec sets no `source.digest` to verify it "
                        "against")
    else:
        for where, path in found:
            got = directory_digest(path)
            if got == want:
                log.info("using the local copy of %s@%s from %s (digest verified)", repo, revision, where)
                return path
            problems.append(f"the copy in {where} has digest {got}, not {want}")
    raise SourceError(f"cannot get {repo}@{revision}: " + "; ".join(problems))
