"""Strict parsing of Triton `config.pbtxt` files with Triton's own protobuf schema.

`tritonclient.grpc.model_config_pb2` is generated from triton-inference-server/common's
model_config.proto; `text_format.Parse` rejects unknown fields, wrong types, a broken oneof and any
`${...}` placeholder that survived, exactly as tritonserver does when it reads the file.
"""

from __future__ import annotations

from dataclasses import dataclass


class ConfigProblem(Exception):
    """A generated Triton configuration that Triton would refuse; `str()` is one line for a user."""


@dataclass(frozen=True)
class ParsedConfig:
    path: str  # repository-relative, e.g. "tiny/config.pbtxt"
    model_dir: str  # the directory the config sits in, i.e. the name Triton gives the model
    config: object  # model_config_pb2.ModelConfig


def model_config_pb2():
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as e:  # a broken install, not bad input: say what to install
        raise ConfigProblem(f"cannot check Triton configurations: {e}; install kiln's dependencies "
                            "(tritonclient[grpc], protobuf>=6.33.5)") from None
    return model_config_pb2


def parse(path: str, text: str):
    """One config.pbtxt -> ModelConfig, or ConfigProblem naming path:line:col."""
    from google.protobuf import text_format

    mc = model_config_pb2()
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as e:
        line, col = e.GetLine(), e.GetColumn()
        message = str(e)
        prefix = f"{line}:{col} : "
        if message.startswith(prefix):
            message = message[len(prefix):]
        where = f"{path}:{line}:{col}" if line else path
        raise ConfigProblem(f"{where}: not a valid Triton model configuration: {message}") from None


def parse_repository(files: dict[str, bytes]) -> list[ParsedConfig]:
    """Every `<model>/config.pbtxt` of a repository (given as {relative path: bytes}), parsed."""
    out = []
    for path in sorted(files):
        parts = path.split("/")
        if len(parts) == 2 and parts[1] == "config.pbtxt":
            try:
                text = files[path].decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigProblem(f"{path}: not UTF-8 text") from None
            out.append(ParsedConfig(path, parts[0], parse(path, text)))
    return out
