"""Reusable constrained types for the spec models, with errors that the parser turns into
precise diagnostics (code, message, help) rather than pydantic's generic text."""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Union

from pydantic import AfterValidator, BaseModel, Discriminator, Field, Tag, WithJsonSchema
from pydantic_core import PydanticCustomError

# Error types the parser maps to codes; ctx carries `help` and optionally `key` (a sub-key to point at).
FORMAT_ERROR = "kiln_format"
VALUE_ERROR = "kiln_value"


def value_error(message: str, *, help: str | None = None, key: str | None = None) -> PydanticCustomError:
    """An error about a combination of values inside one section (K107)."""
    return PydanticCustomError(VALUE_ERROR, message, {"help": help or "", "key": key or ""})


def without_credentials(value: str) -> str:
    """`value` as a message may echo it: credentials written into a reference (`user:password@host/...`,
    with or without a scheme) are masked, whatever characters the password holds; an image digest
    (`name@sha256:...`) is not a credential and stays. The spec layer's own masking: gitops'
    redaction (which masks known secrets anywhere in a text) sits above it."""
    head, at, tail = value.rpartition("@")
    if not at:
        return value
    if tail.startswith("sha256:"):
        return without_credentials(head) + at + tail
    scheme, sep, _userinfo = head.partition("://")
    return (f"{scheme}://" if sep else "") + "***@" + tail


def _pattern(regex: str, what: str, example: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise PydanticCustomError(FORMAT_ERROR, "'{value}' is not {what}",
                                      {"value": without_credentials(value), "what": what, "help": f"example: {example}"})
        return value

    return check


def formatted(regex: str, what: str, example: str, **field_kwargs: Any) -> Any:
    """A string type checked against `regex`; the JSON schema carries the same pattern."""
    # The pattern goes into the schema only (anchored: JSON Schema patterns search); validation is
    # ours so that the error names what was expected instead of echoing a regular expression.
    schema = {"pattern": f"^(?:{regex})$", "examples": [example]}
    return Annotated[str, AfterValidator(_pattern(regex, what, example)),
                     Field(json_schema_extra=schema, **field_kwargs)]


NAME_RE = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
#: Names of models and hosts become file names, container names and shell words: keep them DNS-safe.
Name = formatted(NAME_RE, "a valid name (lowercase letters, digits and '-', at most 63 characters, "
                 "starting and ending with a letter or digit)", "chat-70b")

VERSION_RE = r"[0-9]+\.[0-9]+(\.[0-9]+)?([a-z]+[0-9]*)?(\.post[0-9]+)?"
Version = formatted(VERSION_RE, "a version such as 1.2.1 or 1.3.0rc20 (quote it in YAML)", "1.2.1")

DIGEST_RE = r"sha256:[0-9a-f]{64}"
Digest = formatted(DIGEST_RE, "a sha256 digest", "sha256:" + "0" * 64)

_REPO = r"[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
PINNED_IMAGE_RE = _REPO + r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@" + DIGEST_RE
PinnedImage = formatted(PINNED_IMAGE_RE, "an image reference pinned by digest (repository[:tag]@sha256:...)",
                        "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3@sha256:" + "0" * 64)
REPOSITORY_RE = _REPO
Repository = formatted(REPOSITORY_RE, "an image repository without tag or digest", "registry.example.com/team/app")

HF_REPO_RE = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
HfRepo = formatted(HF_REPO_RE, "a Hugging Face repository id (owner/name)", "meta-llama/Llama-3.1-8B-Instruct")
GitHubRepo = formatted(HF_REPO_RE, "a GitHub repository (owner/name)", "acme/inference-deploy")
GitRefName = formatted(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", "a branch name", "main")
REVISION_RE = r"[0-9a-f]{40}"
Revision = formatted(REVISION_RE, "a full 40-hex commit id (branches and tags move; pin the commit)",
                     "0e9e39f249a16976918f6564b8830bc894c89659")

DRIVER_RE = r"(>=|<=|==|>|<)?[0-9]{3}(\.[0-9]{1,3}){0,2}"
DriverConstraint = formatted(DRIVER_RE, "a driver version constraint such as >=580 or >=570.133.20", ">=580.82.07")

RelPath = formatted(r"[^\x00]+", "a file path", "data/calib/chat.jsonl")

GLOB_RE = r"[A-Za-z0-9_.*?\[\]!-]+"
ModuleGlob = formatted(GLOB_RE, "a module-name pattern (letters, digits, '.', '_', '-' and glob characters)",
                       "*mlp.gate")


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "<many>"
    if isinstance(value, dict):
        return "<mapping>"
    return "<one>"


def one_or_many(item: Any, *, description: str) -> Any:
    """A value given either once or as a list (loc tags are stripped by the parser)."""
    return Annotated[
        Union[Annotated[item, Tag("<one>")], Annotated[list[item], Field(min_length=1), Tag("<many>")]],
        Discriminator(_kind),
        Field(description=description),
    ]


def scalar_or_list(scalar: Any, item: Any, *, description: str) -> Any:
    """A single value, or a non-empty list of another type (a distribution, say)."""
    return Annotated[
        Union[Annotated[scalar, Tag("<one>")], Annotated[list[item], Field(min_length=1), Tag("<many>")]],
        Discriminator(_kind),
        Field(description=description),
    ]


def scalar_or_mapping(scalar: Any, mapping: Any, *, description: str) -> Any:
    return Annotated[
        Union[Annotated[scalar, Tag("<one>")], Annotated[mapping, Tag("<mapping>")]],
        # a mapping when validating, a model instance when serializing
        Discriminator(lambda v: "<mapping>" if isinstance(v, (dict, BaseModel)) else "<one>"),
        Field(description=description),
    ]


__all__ = ["formatted", "value_error", "one_or_many", "scalar_or_list", "scalar_or_mapping", "Name", "Version", "Digest",
           "PinnedImage", "Repository", "HfRepo", "Revision", "DriverConstraint", "RelPath", "ModuleGlob",
           "FORMAT_ERROR", "VALUE_ERROR", "WithJsonSchema"]
