"""Serving base images and the TensorRT-LLM version inside each (``data/images.json``).

Kiln builds and checks artifacts for ``toolchain.tensorrt_llm``; the image that serves them must
ship exactly that version (an engine or a checkpoint config built for another release does not
load, or loads wrong). This table answers, for a pinned image reference, which version it ships,
or why that cannot be told. Checks K803/K804 read it; nothing hard-codes a tag.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from .types import Status

__all__ = ["ImageFacts", "ImageFamily", "ImageTable", "load_image_table", "split_reference"]

_REFERENCE = re.compile(r"(?P<repo>[^@]+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*))?(?:@sha256:[0-9a-f]{64})?")

Verdict = Literal["ships", "no-trtllm", "unknown-tag", "no-tag", "unknown-image"]


@dataclass(frozen=True)
class ImageFamily:
    repository: str
    kind: str  # "triton" or "trtllm-release"
    tag_pattern: re.Pattern
    tags: dict[str, str]  # key (e.g. "26.04") -> TensorRT-LLM version; empty when the tag is the version
    tag_is_version: bool
    other_tags: re.Pattern | None  # tags of the same repository that ship no TensorRT-LLM
    source: str
    status: Status


@dataclass(frozen=True)
class ImageFacts:
    """What the table says about one image reference."""

    reference: str
    verdict: Verdict
    version: str | None = None  # the TensorRT-LLM version it ships ("ships")
    family: ImageFamily | None = None
    tag: str | None = None
    key: str | None = None  # the table key the tag matched (a Triton yy.mm)


def split_reference(ref: str) -> tuple[str, str | None]:
    """(repository, tag or None) of `repo[:tag][@sha256:...]`."""
    m = _REFERENCE.fullmatch(ref.strip())
    if m is None:
        return ref, None
    return m.group("repo"), m.group("tag")


class ImageTable:
    def __init__(self, families: tuple[ImageFamily, ...]):
        self.families = families

    def family(self, repository: str) -> ImageFamily | None:
        return next((f for f in self.families if f.repository == repository), None)

    def facts(self, ref: str) -> ImageFacts:
        repo, tag = split_reference(ref)
        fam = self.family(repo)
        if fam is None:
            return ImageFacts(ref, "unknown-image")
        if tag is None:
            return ImageFacts(ref, "no-tag", family=fam)
        m = fam.tag_pattern.fullmatch(tag)
        if m is None:
            if fam.other_tags is not None and fam.other_tags.fullmatch(tag):
                return ImageFacts(ref, "no-trtllm", family=fam, tag=tag)
            return ImageFacts(ref, "unknown-tag", family=fam, tag=tag)
        if fam.tag_is_version:
            return ImageFacts(ref, "ships", version=m.group("version"), family=fam, tag=tag)
        key = m.group("key")
        if key not in fam.tags:
            return ImageFacts(ref, "unknown-tag", family=fam, tag=tag, key=key)
        return ImageFacts(ref, "ships", version=fam.tags[key], family=fam, tag=tag, key=key)

    def tags_shipping(self, repository: str, same) -> list[str]:
        """Tags of `repository` whose version satisfies `same(version)`, in table order."""
        fam = self.family(repository)
        if fam is None or fam.tag_is_version:
            return []
        suffix = fam.tag_pattern.pattern.split(")", 1)[1].rstrip("$")
        return [f"{k}{suffix}" for k, v in fam.tags.items() if same(v)]


def table_from_dict(data: dict) -> ImageTable:
    families = []
    for row in data["images"]:
        tags = dict(row.get("tags", {}))
        if row.get("tags_from") == "dynamo.json":  # Dynamo's runtime image: its tag is the Dynamo release
            tags = {r["dynamo"]: r["tensorrt_llm"] for r in _dynamo_releases()}
        families.append(ImageFamily(
            repository=row["repository"], kind=row["kind"], tag_pattern=re.compile(row["tag_pattern"]),
            tags=tags, tag_is_version=bool(row.get("tag_is_version", False)),
            other_tags=re.compile(row["other_tags"]) if row.get("other_tags") else None,
            source=row["source"], status=row["status"]))
    return ImageTable(tuple(families))


def _dynamo_releases() -> list[dict]:
    text = (resources.files("compiler.catalog") / "data" / "dynamo.json").read_text(encoding="utf-8")
    return json.loads(text)["releases"]


@lru_cache(maxsize=1)
def load_image_table() -> ImageTable:
    text = (resources.files("compiler.catalog") / "data" / "images.json").read_text(encoding="utf-8")
    return table_from_dict(json.loads(text))
