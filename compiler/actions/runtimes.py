"""What a serving unit runs inside its container, per serving runtime (data/serving_runtimes.json).

One function decides, for a unit, the server's command line, the HTTP paths that answer 200 once
it serves, and the `docker run` options its runtime and width need. The host script
(`host-script`) starts containers with it and waits on the paths; the image entrypoint
(`image-context`) starts the same command for `serve <unit>` and probes the same paths for the
container's health check; so the two cannot drift apart. Every flag of a command is checked
against the runtime's flag set (with its source) before anything is written.

  triton        tritonserver on the host's model repository, loading every model the repository
                defines for the unit's model (llmapi: the model; engine: the ensemble and the
                four models beside it, the BLS model included, which no ensemble step loads).
                An engine of tp * pp > 1 ranks runs one tritonserver per rank under mpirun, as
                upstream's launch_triton_server.py (data: triton.multi_rank, with its source):
                the TensorRT-LLM backend is in leader mode over the MPI world, whose size must
                be tp * pp; rank 0 serves, the others load the engine model only
  trtllm-serve  TensorRT-LLM's OpenAI-compatible server on the model's checkpoint, with the
                model's LLM-API options file (`llmapi-options/<model>`, the file Triton's llmapi
                model reads as model.yaml) at OPTIONS_DIR/<model>/ in the image
"""

from __future__ import annotations

import json
import shlex
from functools import lru_cache

from compiler import resources
from compiler.serving import layout
from compiler.serving.triton import ENGINE_PARTS, engine_names

from . import llmapi
from .base import Params

RUNTIMES = ("triton", "trtllm-serve")
OPTIONS_DIR = f"{layout.IMAGE_ROOT}/llmapi"  # <model>/llm-api-options.yaml: trtllm-serve --config
ENTRYPOINT = f"{layout.IMAGE_ROOT}/bin/serve"
LISTEN = "0.0.0.0"  # all interfaces of the host network, as tritonserver's --http-address defaults to


class ServingCommandError(Exception):
    """A command Kiln would write does not fit the pinned runtime's command line."""


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(resources.read_data("actions", "data", "serving_runtimes.json"))


def options_path(model: str) -> str:
    """Where the model's LLM-API options file sits in the serving image (trtllm-serve --config)."""
    return f"{OPTIONS_DIR}/{model}/{llmapi.OUTPUT}"


def triton_models(target: str, model: str) -> list[str]:
    """The Triton models a unit of `model` loads: every model the repository defines for it."""
    if target == "engine":
        names = engine_names(model)
        return [names["ensemble"], *(names[p] for p in ENGINE_PARTS)]
    return [model]


class UnitServing(Params):
    """What one serving unit runs and how it is checked to serve."""

    runtime: str
    command: list[str]  # argv inside the container
    port: int  # the HTTP port the readiness paths are asked on (127.0.0.1, host network)
    listens: list[int]  # every port the server listens on
    ready: list[str]  # HTTP paths that answer 200 once the unit serves
    files: list[str]  # what the image must hold for the command (the entrypoint checks)
    multi_gpu: bool  # more than one GPU: NCCL between processes of the container
    ranks: int = 1  # processes the command starts (MPI ranks), shown in the plan
    options: list[str] = []  # docker run options (container_options), part of the key like the rest


def unit_serving(runtime: str, target: str, model: str, ports: dict[str, int], tp: int = 1, pp: int = 1,
                 ep: int = 1, gpus: int = 1) -> UnitServing:
    """The serving of one unit (pure). `ports`: http, grpc, metrics; `tp`/`pp`/`ep`: the model's
    parallelism, which the options file also carries (a flag and the file must agree)."""
    ranks = 1
    if runtime == "triton":
        models = triton_models(target, model)
        command = ["tritonserver", f"--model-repository={layout.REPOSITORY_DIR}", "--model-control-mode=explicit",
                   *(f"--load-model={m}" for m in models),
                   f"--http-port={ports['http']}", f"--grpc-port={ports['grpc']}", f"--metrics-port={ports['metrics']}"]
        if target == "engine" and tp * pp > 1:
            ranks = tp * pp
            command = mpi_command(command, engine_names(model)["tensorrt_llm"], ranks)
        ready = []
        for path in table()["triton"]["ready"]["paths"]:  # the server's, then each loaded model's
            ready += [path.replace("{model}", m) for m in models] if "{model}" in path else [path]
        files = [f"{layout.REPOSITORY_DIR}/{m}/config.pbtxt" for m in models]
    elif runtime == "trtllm-serve":
        if target != "llmapi":  # K811 refuses this before lowering
            raise ServingCommandError(f"model {model!r}: trtllm-serve serves the llmapi target only, not {target!r}")
        command = ["trtllm-serve", layout.model_dir(model), "--config", options_path(model),
                   "--host", LISTEN, "--port", str(ports["http"]), "--backend", "pytorch",
                   "--tp_size", str(tp), "--pp_size", str(pp)]
        if ep > 1:
            command += ["--ep_size", str(ep)]
        ready = list(table()["trtllm-serve"]["ready"]["paths"])
        files = [f"{layout.model_dir(model)}/config.json", options_path(model)]
    else:
        raise ServingCommandError(f"unknown serving runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
    problems = [p for argv in rank_commands(command) for p in check_command(runtime, argv)]
    if problems:
        raise ServingCommandError(f"model {model!r}: the {runtime} command does not fit its command line: "
                            + "; ".join(problems))
    serving = UnitServing(runtime=runtime, command=command, port=ports["http"],
                          listens=[ports[k] for k in table()[runtime]["ports"]], ready=ready, files=files,
                          multi_gpu=gpus > 1, ranks=ranks)
    return serving.model_copy(update={"options": container_options(serving)})


def mpi_command(rank0: list[str], engine_model: str, ranks: int) -> list[str]:
    """One tritonserver per rank under mpirun (triton.multi_rank): rank 0 as given, the others
    loading only the engine model; every rank with its own Python-backend shared-memory prefix."""
    rule = table()["triton"]["multi_rank"]
    command = list(rule["launcher"])
    for rank in range(ranks):
        argv = rank0 if rank == 0 else [
            a for a in rank0 if not a.startswith("--load-model=")] + [f"--load-model={engine_model}"]
        if rank:
            command.append(rule["separator"])
        command += [*rule["per_rank"], *argv, *(f.replace("{rank}", str(rank)) for f in rule["every_rank"])]
    return command


def rank_commands(command: list[str]) -> list[list[str]]:
    """The server command line of each rank: the command itself, or each program mpirun starts."""
    rule = table()["triton"]["multi_rank"]
    if command[:len(rule["launcher"])] != rule["launcher"]:
        return [command]
    out: list[list[str]] = [[]]
    for word in command[len(rule["launcher"]):]:
        if word == rule["separator"]:
            out.append([])
        else:
            out[-1].append(word)
    per = len(rule["per_rank"])
    return [argv[per:] if argv[:per] == rule["per_rank"] else argv for argv in out]


def check_command(runtime: str, argv: list[str]) -> list[str]:
    """Each problem of `argv` against the runtime's flag set: an unknown program or flag, a value a
    choice does not allow, a flag without its value, a switch with one, a flag given twice that
    is not repeatable, a missing positional argument. Empty when the command fits."""
    data = table()[runtime]
    flags, repeatable = data["flags"], set(data.get("repeatable", ()))
    problems: list[str] = []
    if not argv or argv[0] != data["program"]:
        return [f"the program is {argv[0] if argv else 'missing'!r}, not {data['program']!r}"]
    positional: list[str] = []
    seen: set[str] = set()
    i = 1
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--"):
            positional.append(word)
            i += 1
            continue
        name, eq, value = word.partition("=")
        if name not in flags:
            problems.append(f"{name} is not a {data['program']} flag")
            i += 1
            continue
        spec = flags[name]
        if spec is True:
            if eq:
                problems.append(f"{name} is a switch and takes no value")
            i += 1
        else:
            if not eq:
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    problems.append(f"{name} needs a value")
                    i += 1
                    continue
                value = argv[i + 1]
                i += 2
            else:
                i += 1
            if isinstance(spec, list) and value not in spec:
                problems.append(f"{name} {value!r} is not one of {', '.join(spec)}")
        if name in seen and name not in repeatable:
            problems.append(f"{name} is given twice")
        seen.add(name)
    want = 1 if data.get("positional") else 0
    if len(positional) != want:
        problems.append(f"{data['program']} takes {want} positional argument(s), got {len(positional)}")
    return problems


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of the first of `names` in `argv` (`--flag value` or `--flag=value`)."""
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in names:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def health_command(serving: UnitServing) -> str:
    """The container's health check (Docker runs it with /bin/sh -c): the entrypoint's probe of
    the unit's readiness paths."""
    return shlex.join([ENTRYPOINT, "--probe", str(serving.port), *serving.ready])


def container_options(serving: UnitServing) -> list[str]:
    """`docker run` options of the unit's container."""
    c = table()["container"]
    opts = ["--shm-size", c["shm_size"]]
    if serving.multi_gpu:
        for name, value in c["multi_gpu_ulimits"].items():
            opts += ["--ulimit", f"{name}={value}"]
    h = c["health"]
    opts += ["--health-cmd", health_command(serving), "--health-interval", h["interval"],
             "--health-timeout", h["timeout"], "--health-retries", str(h["retries"]),
             "--health-start-period", f"{ready_timeout_s()}s"]
    return opts


def ready_timeout_s() -> int:
    """The default bound on a unit's model load: the host script's readiness wait and the health
    check's start period."""
    return int(table()["container"]["ready_timeout_s"])


def ir_unit_serving(ir, unit) -> UnitServing:
    """The serving of one IR unit: its model's runtime and parallelism on the spec's target (the
    host script and the image both place it)."""
    m = ir.models[unit.model].spec
    par = m.parallelism
    return unit_serving(m.serving.runtime, ir.target, unit.model, unit.ports.as_dict(), tp=par.tp,
                        pp=par.pp, ep=par.ep, gpus=len(unit.gpu_indexes))
