"""Triton's rules for a model repository, checked before anything is written or served.

Each rule is one Triton enforces when it loads a repository (triton-inference-server/core
`model_config_utils.cc`, `ensemble_scheduler/ensemble_utils.cc`; facts §5), plus what kiln adds
because Triton accepts it silently and it is always a mistake: a `${...}` placeholder that survived
inside a string, an ensemble input nothing reads, and a TensorRT-LLM backend model that does not
supply what that backend reads (compiler.serving.backend). A problem is one line,
`<path>: <what is wrong>`, so a failed build names the file and the tensor.

Map fields (`input_map`, `output_map`, `parameters`) are read a second time through a copy of the
schema where maps are plain repeated entries: protobuf keeps only the last of two equal keys, and
"every required step input mapped exactly once" must see the first as well.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import backend
from .pbtxt import ConfigProblem, ParsedConfig, model_config_pb2, parse_repository

ENSEMBLE = "ensemble"


@dataclass(frozen=True)
class Tensor:
    dtype: int
    dims: tuple[int, ...]
    batching: bool  # the owner has max_batch_size > 0: the full shape is [-1, *dims]
    where: str  # for messages: "model 'x' output 'y'"


def check_repository(files: dict[str, bytes]) -> list[str]:
    """Every problem Triton (or kiln) would find in a repository given as {relative path: bytes}."""
    try:
        parsed = parse_repository(files)
    except ConfigProblem as e:
        return [str(e)]
    problems: list[str] = []
    for path, data in sorted(files.items()):
        if path.endswith("config.pbtxt") and b"${" in data:
            line = data[:data.index(b"${")].count(b"\n") + 1
            problems.append(f"{path}:{line}: a template placeholder `${{...}}` survived")
    models = {p.model_dir: p for p in parsed}
    for p in parsed:
        problems += [f"{p.path}: {m}" for m in _model_rules(p, files)]
        keys = [e.key for e in _raw(files[p.path]).parameters]
        for k in sorted({k for k in keys if keys.count(k) > 1}):  # protobuf would keep the last silently
            problems.append(f"{p.path}: parameter {k!r} is set {keys.count(k)} times")
    for p in parsed:
        if p.config.platform == ENSEMBLE:
            problems += [f"{p.path}: {m}" for m in _ensemble_rules(p, models, _raw(files[p.path]))]
    return problems


def verify_repository(files: dict[str, bytes]) -> None:
    """Raise ConfigProblem listing every problem; a repository that passes is one Triton accepts."""
    problems = check_repository(files)
    if problems:
        raise ConfigProblem("the generated Triton repository breaks Triton's rules:\n  " + "\n  ".join(problems))


# --- one model ----------------------------------------------------------------------------------
def _model_rules(p: ParsedConfig, files: dict[str, bytes]) -> list[str]:
    c = p.config
    out: list[str] = []
    if c.name != p.model_dir:
        out.append(f"name {c.name!r} differs from its directory {p.model_dir!r}")
    if not c.platform and not c.backend:
        out.append("names neither a platform nor a backend")
    out += _ensemble_shape(c)
    if c.max_batch_size < 0:
        out.append(f"max_batch_size {c.max_batch_size} is negative")
    out += _tensor_rules(c) + _batching_rules(c) + _instance_rules(c)
    if c.backend == backend.BACKEND:
        out += backend.check(c)
    if c.platform != ENSEMBLE and c.backend == "python" and f"{p.model_dir}/1/model.py" not in files:
        out.append("a Python-backend model needs 1/model.py")
    if not any(f.startswith(f"{p.model_dir}/1/") for f in files):
        # Triton loads nothing without a version directory, even where the model file lives elsewhere
        out.append("no version directory 1/ (Triton: 'at least one version must be available')")
    return out


def _ensemble_shape(c) -> list[str]:
    """An ensemble schedules steps and nothing else; only an ensemble has ensemble_scheduling."""
    if c.platform != ENSEMBLE:
        return ["ensemble_scheduling on a model that is not an ensemble"] if c.HasField("ensemble_scheduling") else []
    out = []
    if c.backend:
        out.append("an ensemble must not name a backend")
    if c.WhichOneof("scheduling_choice") != "ensemble_scheduling":
        out.append("an ensemble needs ensemble_scheduling")
    if c.model_transaction_policy.decoupled:
        out.append("an ensemble cannot itself be decoupled")
    if len(c.model_warmup):
        out.append("an ensemble cannot have model_warmup")
    return out


def _tensor_rules(c) -> list[str]:
    """Inputs and outputs: each name once, a data type, dims -1 or positive."""
    mc, out = model_config_pb2(), []
    for kind, tensors in (("input", c.input), ("output", c.output)):
        seen: set[str] = set()
        for t in tensors:
            if t.name in seen:
                out.append(f"{kind} {t.name!r} is declared twice")
            seen.add(t.name)
            if t.data_type == mc.TYPE_INVALID:
                out.append(f"{kind} {t.name!r} has no data_type")
            bad = [d for d in t.dims if d != -1 and d <= 0]
            if bad:
                out.append(f"{kind} {t.name!r} has dimension {bad[0]}; dims are -1 (variable) or positive")
    return out


def _batching_rules(c) -> list[str]:
    """The dynamic batcher's sizes, priorities and queue policies."""
    if not c.HasField("dynamic_batching"):
        return []
    mc, db, out = model_config_pb2(), c.dynamic_batching, []
    for size in db.preferred_batch_size:
        if size <= 0:
            out.append(f"dynamic_batching preferred_batch_size {size} must be positive")
        elif size > c.max_batch_size:
            out.append(f"dynamic_batching preferred_batch_size {size} exceeds max_batch_size {c.max_batch_size}")
    if db.priority_levels and not 1 <= db.default_priority_level <= db.priority_levels:
        out.append(f"default_priority_level {db.default_priority_level} is outside [1, {db.priority_levels}]")
    policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
    if db.preserve_ordering and any(q.timeout_action == mc.ModelQueuePolicy.DELAY for q in policies):
        out.append("a DELAY timeout action cannot be combined with preserve_ordering")
    return out


def _instance_rules(c) -> list[str]:
    """Instance groups, and one gpu_device_ids set per instance (the TensorRT-LLM backend's)."""
    out, count = [], 0
    for g in c.instance_group:
        if g.count < 0:
            out.append(f"instance_group count {g.count} is negative")
        count += g.count or 1
    ids = c.parameters["gpu_device_ids"].string_value if "gpu_device_ids" in c.parameters else None
    if ids is not None:
        sets = ids.split(";")
        if len(sets) != max(count, 1):
            out.append(f"gpu_device_ids {ids!r} has {len(sets)} device set(s) for {max(count, 1)} instance(s)")
        for s in sets:
            if not s or not all(x.isdigit() for x in s.split(",")):
                out.append(f"gpu_device_ids {ids!r}: {s!r} is not a comma-separated list of device ordinals")
    return out


# --- an ensemble and the models it composes -----------------------------------------------------
@functools.lru_cache(maxsize=1)
def _raw_class():
    """ModelConfig with every map turned into a repeated entry message (see the module docstring)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    mc = model_config_pb2()
    fdp = descriptor_pb2.FileDescriptorProto()
    mc.DESCRIPTOR.CopyToProto(fdp)

    def unmap(messages) -> None:
        for m in messages:
            if m.options.map_entry:
                m.options.map_entry = False
            unmap(m.nested_type)

    unmap(fdp.message_type)
    fdp.name = "kiln_raw_" + fdp.name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.ModelConfig"))


def _raw(data: bytes):
    from google.protobuf import text_format

    return text_format.Parse(data.decode("utf-8"), _raw_class()())


def _dims_match(a: Tensor, b: Tensor) -> bool:
    def wild(x: tuple[int, ...], y: tuple[int, ...]) -> bool:
        return len(x) == len(y) and all(i == j or i == -1 or j == -1 for i, j in zip(x, y))

    full = lambda t: ((-1,) + t.dims) if t.batching else t.dims  # noqa: E731
    return wild(a.dims, b.dims) or wild(full(a), full(b))


def _step_rules(label: str, step, raw_step, m, ensemble_batch: int) -> list[str]:
    """One step's own declarations: its version, its maps (each key once, every required input
    mapped) and a batch size its model can take."""
    out = []
    if step.model_version != -1 and step.model_version < 1:
        out.append(f"{label}: model_version {step.model_version} (use -1 for the latest)")
    if not step.input_map or not step.output_map:
        out.append(f"{label}: a step needs both an input_map and an output_map")
    if m.max_batch_size and ensemble_batch > m.max_batch_size:
        out.append(f"ensemble max_batch_size {ensemble_batch} exceeds {step.model_name!r}'s {m.max_batch_size}")
    keys = [e.key for e in raw_step.input_map]  # the raw message keeps a key mapped twice; the map does not
    for k in sorted({k for k in keys if keys.count(k) > 1}):
        out.append(f"{label}: input {k!r} is mapped {keys.count(k)} times")
    for t in m.input:
        if not t.optional and t.name not in step.input_map:
            out.append(f"{label}: required input {t.name!r} of {step.model_name!r} is not mapped")
    okeys = [e.key for e in raw_step.output_map]
    for k in sorted({k for k in okeys if okeys.count(k) > 1}):
        out.append(f"{label}: output {k!r} is mapped {okeys.count(k)} times")
    return out


def _disagree(want: Tensor, have: Tensor, via: str) -> list[str]:
    """Whether the tensor feeding `want` has its type and a shape it can take (`via`: which tensor)."""
    type_name = model_config_pb2().DataType.Name
    if have.dtype != want.dtype:
        return [f"{want.where} is {type_name(want.dtype)} but {have.where}{via} is {type_name(have.dtype)}"]
    if not _dims_match(have, want):
        return [f"{want.where} has dims {list(want.dims)} but {have.where}{via} has {list(have.dims)}"]
    return []


def _ensemble_rules(p: ParsedConfig, models: dict[str, ParsedConfig], raw) -> list[str]:
    ens = p.config
    out: list[str] = []
    steps = list(ens.ensemble_scheduling.step)
    if not steps:
        return ["ensemble_scheduling has no step"]
    batching = ens.max_batch_size > 0
    known: dict[str, Tensor] = {}  # ensemble tensor -> what feeds it
    origin: dict[str, frozenset[str]] = {}
    for t in ens.input:
        known[t.name] = Tensor(t.data_type, tuple(t.dims), batching, f"ensemble input {t.name!r}")
        origin[t.name] = frozenset()
    producer: dict[str, str] = {}
    consumed: set[str] = set()
    pending = []
    for i, (step, raw_step) in enumerate(zip(steps, raw.ensemble_scheduling.step)):
        name = step.model_name
        label = f"step {i + 1} ({name})"
        if not name:
            out.append(f"step {i + 1} names no model")
            continue
        target = models.get(name)
        if target is None:
            out.append(f"{label}: no model {name!r} in the repository")
            continue
        m = target.config
        out += _step_rules(label, step, raw_step, m, ens.max_batch_size)
        inputs = {t.name: t for t in m.input}
        outputs = {t.name: t for t in m.output}
        for model_in, tensor in sorted(step.input_map.items()):
            if model_in not in inputs:
                out.append(f"{label}: {name!r} has no input {model_in!r}")
                continue
            t = inputs[model_in]
            pending.append((label, Tensor(t.data_type, tuple(t.dims), m.max_batch_size > 0,
                                          f"{name!r} input {model_in!r}"), tensor))
            consumed.add(tensor)
        decoupled = m.model_transaction_policy.decoupled
        for model_out, tensor in sorted(step.output_map.items()):
            if model_out not in outputs:
                out.append(f"{label}: {name!r} has no output {model_out!r}")
                continue
            if tensor in producer or tensor in {t.name for t in ens.input}:
                first = producer.get(tensor, "an ensemble input")
                out.append(f"{label}: ensemble tensor {tensor!r} is already produced by {first}")
                continue
            t = outputs[model_out]
            producer[tensor] = label
            known[tensor] = Tensor(t.data_type, tuple(t.dims), m.max_batch_size > 0, f"{name!r} output {model_out!r}")
            origin[tensor] = frozenset({name}) if decoupled else frozenset()  # completed below
    # inputs: each tensor must exist, and agree in type and shape with what feeds it
    for label, want, tensor in pending:
        have = known.get(tensor)
        if have is None:
            out.append(f"{label}: ensemble tensor {tensor!r} is neither an ensemble input nor a step output")
            continue
        out += [f"{label}: {problem}" for problem in _disagree(want, have, f" ({tensor!r})")]
    for t in ens.output:
        have = known.get(t.name)
        if have is None or t.name not in producer:
            out.append(f"ensemble output {t.name!r} is produced by no step")
            continue
        out += _disagree(Tensor(t.data_type, tuple(t.dims), batching, f"ensemble output {t.name!r}"), have, "")
    for t in ens.input:
        if t.name not in consumed:
            out.append(f"ensemble input {t.name!r} is read by no step")
    out += _decoupled_origins(steps, models, origin)
    return out


def _decoupled_origins(steps, models: dict[str, ParsedConfig], origin: dict[str, frozenset[str]]) -> list[str]:
    """Triton refuses a step whose inputs come from two different decoupled models (their responses
    cannot be paired). Origins flow along the steps until nothing changes (the graph is small)."""
    out = []
    changed = True
    while changed:
        changed = False
        for step in steps:
            target = models.get(step.model_name)
            if target is None:
                continue
            got = frozenset().union(*(origin.get(t, frozenset()) for t in step.input_map.values()))
            own = frozenset({step.model_name}) if target.config.model_transaction_policy.decoupled else frozenset()
            for tensor in step.output_map.values():
                new = origin.get(tensor, frozenset()) | got | own
                if new != origin.get(tensor):
                    origin[tensor] = new
                    changed = True
    for i, step in enumerate(steps):
        got = frozenset().union(*(origin.get(t, frozenset()) for t in step.input_map.values()))
        if len(got) > 1:
            out.append(f"step {i + 1} ({step.model_name}): inputs come from different decoupled models "
                       f"{sorted(got)}")
    return out
