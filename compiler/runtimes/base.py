"""The protocol every serving runtime follows, and what all of them share.

A serving runtime is one module (compiler/runtimes/<name>.py, a ServingRuntime subclass) and one
data file (compiler/runtimes/data/<name>.json: its program, flag set, ports, readiness paths and
the spec settings it ignores, each fact with its source). The host script, the image entrypoint
and the Kubernetes container all take a unit's command, paths and options from `serve`, so they
cannot drift apart; the checks read the same runtime objects, never a runtime's name.

Shared here: the command checker (`check_argv`, against the runtime's own flag table, for
every rank's command line) and the container's `docker run` options (data/container.json).
"""

from __future__ import annotations

import json
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property, lru_cache

from compiler import resources
from compiler.params import Params
from compiler.serving import layout

ENTRYPOINT = f"{layout.IMAGE_ROOT}/bin/serve"
LISTEN = "0.0.0.0"  # all interfaces of the host network, as tritonserver's --http-address defaults to


class ServingCommandError(Exception):
    """A command Kiln would write does not fit the pinned runtime's command line."""


@dataclass(frozen=True)
class Unit:
    """What a runtime needs to know of one serving unit. `ports`: http, grpc, metrics;
    `tp`/`pp`/`ep`: the model's parallelism (the options file carries it too); `gpus`: devices."""

    model: str
    target: str  # the spec's target: llmapi or engine
    ports: dict[str, int]
    tp: int = 1
    pp: int = 1
    ep: int = 1
    gpus: int = 1
    role: str | None = None  # disaggregated serving: the unit's role (prefill or decode)


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


@dataclass(frozen=True)
class Ignored:
    """A spec `serving.*` setting a runtime does not act on, and why (from its data file)."""

    setting: str  # the key under serving, e.g. max_queue_delay_us or ports.grpc
    why: str


class ServingRuntime(ABC):
    """One serving runtime. Subclasses set `name` and `data_file` and build the command."""

    name: str  # the spec's `serving.runtime` value
    data_file: str  # under compiler/runtimes/data/

    @cached_property
    def data(self) -> dict:
        return json.loads(resources.read_data("runtimes", "data", self.data_file))

    # --- what it serves -------------------------------------------------------------------------
    @property
    def targets(self) -> tuple[str, ...]:
        """The spec targets it serves (llmapi, engine)."""
        return tuple(self.data["targets"])

    def refusal(self, target: str) -> str | None:
        """Why it cannot serve `target` (K811 and ServingCommandError say it), or None."""
        if target in self.targets:
            return None
        return self.data.get("refusals", {}).get(target, f"it serves the {' and '.join(self.targets)} target only")

    @property
    def serves_roles(self) -> bool:
        """Whether its servers can be the prefill and decode servers of disaggregated serving (K162)."""
        return bool(self.data.get("roles"))

    @property
    def artifacts(self) -> tuple[str, ...]:
        """What the serving image holds for it beside the checkpoints: repository (the host's
        Triton model repository), options (the model's LLM-API options file)."""
        return tuple(self.data["artifacts"])

    # --- how it is started and reached -------------------------------------------------------
    @abstractmethod
    def command(self, unit: Unit) -> list[str]:
        """The argv inside the container; a multi-rank unit's launcher included."""

    def ranks(self, unit: Unit) -> int:
        """Processes the command starts (MPI ranks)."""
        return 1

    def rank_commands(self, command: list[str]) -> list[list[str]]:
        """The server command line of each rank (each is checked against the flag table)."""
        return [command]

    @abstractmethod
    def files(self, unit: Unit) -> list[str]:
        """What the image must hold for the command (repository configs, checkpoint, options file)."""

    def ready(self, unit: Unit) -> list[str]:
        """HTTP paths that answer 200 once the unit serves; `{model}` paths once per loaded model."""
        out: list[str] = []
        for path in self.data["ready"]["paths"]:
            out += [path.replace("{model}", m) for m in self.loaded_models(unit)] if "{model}" in path else [path]
        return out

    def loaded_models(self, unit: Unit) -> list[str]:
        """The server-side model names a `{model}` readiness path is asked for."""
        return [unit.model]

    @property
    def live(self) -> str:
        """The liveness path (Kubernetes liveness probe)."""
        return self.data["ready"]["live"]

    @property
    def ports(self) -> tuple[str, ...]:
        """The `serving.ports` keys it listens on (http first: readiness is asked there)."""
        return tuple(self.data["ports"])

    # --- what of the spec it reads ------------------------------------------------------------
    def ignored(self, target: str) -> list[Ignored]:
        """The serving settings without effect on this runtime (K812, an error: Kiln refuses them)."""
        out = [Ignored(k, why) for k, why in self.data.get("ignores", {}).items()]
        note = self.data.get("ports_note", "")
        out += [Ignored(f"ports.{k}", f"{self.name} listens on {', '.join(f'ports.{p}' for p in self.ports)} only"
                        + (f" ({note})" if note else "")) for k in ("http", "grpc", "metrics") if k not in self.ports]
        return out

    def ignored_on_target(self, target: str) -> list[Ignored]:
        """Settings it honours on some targets but not on `target` (K613, a warning)."""
        return [Ignored(k, why) for k, why in self.data.get("ignores_on_target", {}).get(target, {}).items()]

    def honours(self, setting: str, target: str) -> bool:
        """Whether `serving.<setting>` acts on a unit of this runtime on `target`."""
        return setting not in {i.setting for i in (*self.ignored(target), *self.ignored_on_target(target))}

    def restarts(self, old: UnitServing, new: UnitServing) -> list[str]:
        """What of a unit changes between two plans' servings, each a reason its container restarts
        (empty: nothing does). Every input of the command, paths and options restarts it."""
        return [f for f in ("command", "listens", "ready", "files", "options") if getattr(old, f) != getattr(new, f)]

    # --- the unit -----------------------------------------------------------------------------
    def checked(self, command: list[str], model: str) -> list[str]:
        """`command`, raising ServingCommandError when it does not fit the flag table."""
        problems = check_argv(self.data, command)
        if problems:
            raise ServingCommandError(f"model {model!r}: the {self.name} command does not fit its command line: "
                                      + "; ".join(problems))
        return command

    def serve(self, unit: Unit) -> UnitServing:
        """The serving of one unit (pure), its command checked against the flag table."""
        why = self.refusal(unit.target)
        if why is not None:  # K811 refuses this before lowering
            raise ServingCommandError(f"model {unit.model!r}: {self.name} serves the {' and '.join(self.targets)} "
                                      f"target only, not {unit.target!r} ({why})")
        command = self.command(unit)
        problems = [p for argv in self.rank_commands(command) for p in check_argv(self.data, argv)]
        if problems:
            raise ServingCommandError(f"model {unit.model!r}: the {self.name} command does not fit its command "
                                      "line: " + "; ".join(problems))
        serving = UnitServing(runtime=self.name, command=command, port=unit.ports["http"],
                              listens=[unit.ports[k] for k in self.ports], ready=self.ready(unit),
                              files=self.files(unit), multi_gpu=unit.gpus > 1, ranks=self.ranks(unit))
        return serving.model_copy(update={"options": container_options(serving)})


def check_argv(data: dict, argv: list[str]) -> list[str]:
    """Each problem of `argv` against a runtime's flag set (`data`: its data file): an unknown
    program or flag, a value a choice does not allow, a flag without its value, a switch with
    one, a flag given twice that is not repeatable, a missing positional argument. Empty when the
    command fits."""
    flags, repeatable = data["flags"], set(data.get("repeatable", ()))
    problems: list[str] = []
    if not argv or argv[0] != data["program"]:
        return [f"the program is {argv[0] if argv else 'missing'!r}, not {data['program']!r}"]
    i = 1
    if data.get("module"):  # a Python module run by the interpreter: `python3 -m <module> ...`
        if argv[1:3] != ["-m", data["module"]]:
            return [f"{data['program']} must run -m {data['module']}, not {' '.join(argv[1:3]) or 'nothing'}"]
        i = 3
    positional: list[str] = []
    seen: set[str] = set()
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


# --- the container, whatever the runtime (data/container.json) ---------------------------------
@lru_cache(maxsize=1)
def container() -> dict:
    return json.loads(resources.read_data("runtimes", "data", "container.json"))


def health_command(serving: UnitServing) -> str:
    """The container's health check (Docker runs it with /bin/sh -c): the entrypoint's probe of
    the unit's readiness paths."""
    return shlex.join([ENTRYPOINT, "--probe", str(serving.port), *serving.ready])


def container_options(serving: UnitServing) -> list[str]:
    """`docker run` options of the unit's container."""
    c = container()
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
    return int(container()["ready_timeout_s"])
