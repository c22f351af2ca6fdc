"""Facts about disaggregated prefill/decode serving, by TensorRT-LLM release line
(catalog/data/disaggregated.json): the KV-transfer backends each line accepts and how it spells
them, the disaggregated server's config keys, the overlap-scheduler rule on context servers, the
attention backends that survive asymmetric tensor parallelism, UCX environment rules and Dynamo's
names for the roles. Each fact carries its source and status."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from compiler import resources


@dataclass(frozen=True)
class TransceiverLine:
    """What `cache_transceiver_config` is in one TensorRT-LLM release line."""

    line: str  # MAJOR.MINOR
    backends: tuple[str, ...]  # as that line spells them
    fields: tuple[str, ...]
    default_backend: str
    status: str
    source: str
    python_runtime_needs: str | None = None  # the backend the line's default (Python) transceiver needs


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(resources.read_data("catalog", "data", "disaggregated.json"))


def release_line(version: str) -> str:
    """"1.2.1" or "1.3.0rc29" -> "1.2" / "1.3"."""
    return ".".join(version.split(".")[:2])


def transceiver(version: str) -> TransceiverLine | None:
    """The transceiver facts of the line a TensorRT-LLM version belongs to (None: not recorded)."""
    line = release_line(version)
    for r in table()["transceiver"]["lines"]:
        if r["tensorrt_llm"] == line:
            return TransceiverLine(line, tuple(r["backends"]), tuple(r["fields"]), r["default_backend"],
                                   r["status"], r["source"], r.get("python_runtime_needs"))
    return None


def known_lines() -> list[str]:
    return [r["tensorrt_llm"] for r in table()["transceiver"]["lines"]]


def context_needs_overlap_off(version: str) -> bool | None:
    """Whether context servers of this version must disable the overlap scheduler (None: unknown)."""
    line = release_line(version)
    for r in table()["overlap_scheduler"]["lines"]:
        if r["tensorrt_llm"] == line:
            return bool(r["context_requires_disabled"])
    return None


def fact(*path: str) -> dict:
    """One fact record by its keys, e.g. fact("asymmetric_tp") or fact("ucx", "tls_needs_cuda")."""
    node = table()
    for key in path:
        node = node[key]
    return node


def source_of(*path: str) -> str:
    rec = fact(*path)
    return f"{rec['source']} [{rec['status']}]"


def server_config_keys() -> dict[str, frozenset[str]]:
    """The keys `trtllm-serve disaggregated -c` reads: top level, per server section, and router."""
    sc = table()["server_config"]
    return {"top_level": frozenset(sc["top_level"]), "servers": frozenset(sc["servers"]),
            "router": frozenset(sc["router_keys"]), "router_types": frozenset(sc["router_types"])}
