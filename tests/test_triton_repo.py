"""Triton model repositories (`triton-repo`) for every example and both targets, checked with
Triton's own protobuf schema (tritonclient.grpc.model_config_pb2, strict text-format parsing) and
Triton's cross-model rules; each rule is also shown to fire on a deliberately broken repository.
The real server test is tests/test_triton_server.py.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
from pathlib import Path

import pytest

from compiler.actions import llmapi, triton_repo
from compiler.store.digests import DigestCache
from compiler.graph.kinds import RunContext
from compiler.lower import lower
from compiler.pipeline import validate_path
from compiler.serving import backend, rules
from compiler.serving.layout import ENGINE_SUBDIR
from compiler.serving import triton as tr
from compiler.serving.pbtxt import ConfigProblem, parse, parse_repository
from compiler.targets.registry import REGISTRY
from tests.quickstart import with_batcher_delay

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden" / "triton"
EXAMPLE_NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "kiln.yaml").is_file())
QUICK_MODEL = EXAMPLES / "quickstart" / "model"


_COPIES = tempfile.TemporaryDirectory(prefix="kiln-test-triton-repo-")  # removed when the run ends


@functools.lru_cache(maxsize=None)
def validated(example: str, target: str = "llmapi"):
    path = EXAMPLES / example / "kiln.yaml"
    text = path.read_text(encoding="utf-8")
    if target == "engine" and with_batcher_delay(text) != text:  # the quickstart as its engine tests have it
        copy = Path(_COPIES.name) / example
        shutil.copytree(path.parent, copy, ignore=shutil.ignore_patterns("*.safetensors"))
        (copy / "kiln.yaml").write_text(with_batcher_delay(text), encoding="utf-8")
        path = copy / "kiln.yaml"
    result = validate_path(path)
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    return result


def rendered(example: str, host: str, target: str) -> tuple[dict, dict[str, bytes]]:
    """The repository's rendered files (no tokenizers) for the example, its target set to `target`."""
    r = validated(example, target)
    params = tr.repository_params(r.resolved, host, target)
    options = {m: llmapi.options(rm) for m, rm in r.resolved.models.items()}
    return params, tr.render(params, options)


def with_tokenizers(params, files: dict[str, bytes]) -> dict[str, bytes]:
    out = dict(files)
    for where in tr.tokenizer_dirs(params):
        for f in triton_repo.tokenizer_files(QUICK_MODEL):
            out[f"{where}/{f.name}"] = f.read_bytes()
    return out


CASES = [(e, h, t) for e in EXAMPLE_NAMES for h in sorted(validated(e).resolved.hosts)
         if any(u.host == h for u in validated(e).resolved.units) for t in tr.TARGETS]


# --- every example, both targets ----------------------------------------------------------------
@pytest.mark.parametrize("example,host,target", CASES, ids=[f"{e}-{h}-{t}" for e, h, t in CASES])
def test_every_config_parses_strictly_and_passes_triton_rules(example: str, host: str, target: str) -> None:
    params, files = rendered(example, host, target)
    configs = parse_repository(files)
    spec = validated(example, target).spec
    per_model = 1 if target == "llmapi" else 5
    assert len(configs) == per_model * len(params.models)
    assert all(b"${" not in data for data in files.values())
    assert rules.check_repository(with_tokenizers(params, files)) == []

    mc = __import__("tritonclient.grpc.model_config_pb2", fromlist=["x"])
    by_name = {c.model_dir: c.config for c in configs}
    units = [u for u in validated(example, target).resolved.units if u.host == host]
    for m in params.models:
        model = spec.models[m.name]
        s = model.serving
        width = model.parallelism.tp * model.parallelism.pp
        assert {len(u.gpu_indexes) for u in units if u.model == m.name} == {width}
        # the model that meets the engine (or the LLM API) carries batching and admission control
        front = by_name[m.name if target == "llmapi" else f"{m.name}-tensorrt_llm"]
        p = {k: v.string_value for k, v in front.parameters.items()}
        if target == "llmapi":
            # TensorRT-LLM's own LLM-API model's shape: no Triton batching, no dynamic batcher (its
            # lost wake-ups stall a busy instance for 500 ms); the model admits, as Triton's queue would
            assert front.max_batch_size == 0 and not front.HasField("dynamic_batching")
            assert p["max_inflight_requests"] == str(model.limits.max_batch_size)
            assert p["max_queue_size"] == str(s.max_queue_size or 0)
            assert p["queue_timeout_ms"] == str(s.queue_timeout_ms or 0)
        else:
            assert front.max_batch_size == model.limits.max_batch_size
            db = front.dynamic_batching
            assert db.max_queue_delay_microseconds == s.max_queue_delay_us
            q = db.default_queue_policy
            assert q.max_queue_size == (s.max_queue_size or 0)
            if s.queue_timeout_ms is not None:
                assert q.timeout_action == mc.ModelQueuePolicy.REJECT
                assert q.default_timeout_microseconds == s.queue_timeout_ms * 1000
                assert not q.allow_timeout_override
        assert front.model_transaction_policy.decoupled == s.streaming
        ids = front.parameters["gpu_device_ids"].string_value
        assert ids == ";".join([",".join(map(str, range(width)))] * s.instances)
        assert sum(g.count for g in front.instance_group) == s.instances
        if target == "llmapi":
            yaml_text = files[f"{m.name}/1/model.yaml"].decode()
            assert f"model: /opt/kiln/models/{m.name}\n" in yaml_text
            assert f"max_num_tokens: {model.limits.max_num_tokens}\n" in yaml_text
            assert f"tensor_parallel_size: {model.parallelism.tp}\n" in yaml_text
        else:
            # the engine artifact (config.json under ENGINE_SUBDIR) is copied to /opt/kiln/models/<model>
            assert p["gpt_model_path"] == f"/opt/kiln/models/{m.name}/{ENGINE_SUBDIR}"
            assert p["kv_cache_free_gpu_mem_fraction"] == str(model.runtime.kv_cache_memory_fraction)
            # build-time limits are the engine's: config.pbtxt would ignore them (tensorrtllm_backend#402)
            assert not {"max_num_tokens", "max_input_len", "max_seq_len"} & set(p)
            ens = by_name[m.name]
            assert ens.platform == "ensemble" and ens.max_batch_size == model.limits.max_batch_size
            assert [st.model_name for st in ens.ensemble_scheduling.step] == \
                [f"{m.name}-preprocessing", f"{m.name}-tensorrt_llm", f"{m.name}-postprocessing"]


def test_rendering_is_deterministic_and_machine_independent() -> None:
    a = rendered("b200-mig-three-models", "b200-a", "engine")[1]
    b = rendered("b200-mig-three-models", "b200-a", "engine")[1]
    assert a == b
    assert not any(str(ROOT).encode() in data for data in a.values())


def test_a_missing_template_value_is_an_error_not_a_blank() -> None:
    params, _ = rendered("quickstart", "dev-h100", "engine")

    def with_model(**values) -> tr.RepositoryParams:
        # model_construct skips validation: the template must catch what the parameters lack
        m = tr.TritonModel.model_construct(**values)
        return params.model_copy(update={"models": [m, *params.models[1:]]})

    first = params.models[0].to_json()
    del first["max_queue_delay_us"]
    with pytest.raises(Exception, match="max_queue_delay_us"):
        tr.render(with_model(**first))
    with pytest.raises(Exception, match="None"):
        tr.render(with_model(**{**params.models[0].to_json(), "gpt_model_type": None}))


# --- each rule fires ----------------------------------------------------------------------------
def quick_engine() -> dict[str, bytes]:
    params, files = rendered("quickstart", "dev-h100", "engine")
    return with_tokenizers(params, files)


def edit(files: dict[str, bytes], path: str, old: str, new: str, count: int = 1) -> dict[str, bytes]:
    text = files[path].decode()
    assert text.count(old) >= 1, f"{path}: {old!r} not found"
    out = dict(files)
    out[path] = text.replace(old, new, count).encode()
    return out


ENS, PRE, TRT, POST = ("tiny/config.pbtxt", "tiny-preprocessing/config.pbtxt", "tiny-tensorrt_llm/config.pbtxt",
                       "tiny-postprocessing/config.pbtxt")

BROKEN = [
    ("placeholder-in-number", lambda f: edit(f, TRT, "max_batch_size: 8", "max_batch_size: ${triton_max_batch_size}"),
     "tiny-tensorrt_llm/config.pbtxt:14:17: not a valid Triton model configuration: "
     "'max_batch_size: ${triton_max_batch_size}': Couldn't parse integer: $"),
    ("placeholder-in-string", lambda f: edit(f, TRT, '"/opt/kiln/models/tiny/engine"', '"${engine_dir}"'),
     "tiny-tensorrt_llm/config.pbtxt:168: a template placeholder `${...}` survived"),
    ("unknown-field", lambda f: edit(f, PRE, "max_batch_size: 8", "max_batch_size: 8\nmax_input_len: 256"),
     'Message type "inference.ModelConfig" has no field named "max_input_len"'),
    ("preferred-above-max", lambda f: edit(f, PRE, "max_queue_delay_microseconds: 100",
                                           "max_queue_delay_microseconds: 100\n  preferred_batch_size: [ 4, 16 ]"),
     "tiny-preprocessing/config.pbtxt: dynamic_batching preferred_batch_size 16 exceeds max_batch_size 8"),
    ("ensemble-batch-above-step", lambda f: edit(f, POST, "max_batch_size: 8", "max_batch_size: 4"),
     "tiny/config.pbtxt: ensemble max_batch_size 8 exceeds 'tiny-postprocessing''s 4"),
    ("required-input-unmapped", lambda f: edit(f, ENS, 'input_map { key: "input_lengths" value: "_input_lengths" }', ""),
     "tiny/config.pbtxt: step 2 (tiny-tensorrt_llm): required input 'input_lengths' of 'tiny-tensorrt_llm' is not mapped"),
    ("input-mapped-twice", lambda f: edit(f, ENS, 'input_map { key: "text" value: "text_input" }',
                                          'input_map { key: "text" value: "text_input" }\n'
                                          '      input_map { key: "text" value: "stop_words" }'),
     "tiny/config.pbtxt: step 1 (tiny-preprocessing): input 'text' is mapped 2 times"),
    ("type-mismatch", lambda f: edit(f, ENS, 'name: "max_tokens"\n    data_type: TYPE_INT32',
                                     'name: "max_tokens"\n    data_type: TYPE_INT64'),
     "tiny/config.pbtxt: step 1 (tiny-preprocessing): 'tiny-preprocessing' input 'max_tokens' is TYPE_INT32 but "
     "ensemble input 'max_tokens' ('max_tokens') is TYPE_INT64"),
    ("shape-mismatch", lambda f: edit(f, PRE, 'name: "stop_words_list"\n    data_type: TYPE_INT32\n    dims: [ 2, -1 ]',
                                      'name: "stop_words_list"\n    data_type: TYPE_INT32\n    dims: [ 3, -1 ]'),
     "tiny/config.pbtxt: step 2 (tiny-tensorrt_llm): 'tiny-tensorrt_llm' input 'stop_words_list' has dims [2, -1] "
     "but 'tiny-preprocessing' output 'stop_words_list' ('_stop_words_list') has [3, -1]"),
    ("duplicate-output-name", lambda f: edit(f, POST, 'output [\n  {\n    name: "text"',
                                             'output [\n  { name: "text" data_type: TYPE_STRING dims: [ -1 ] },\n'
                                             '  {\n    name: "text"'),
     "tiny-postprocessing/config.pbtxt: output 'text' is declared twice"),
    ("tensor-produced-twice", lambda f: edit(f, ENS, 'output_map { key: "sequence_length" value: "_sequence_length" }',
                                             'output_map { key: "sequence_length" value: "_input_lengths" }'),
     "tiny/config.pbtxt: step 2 (tiny-tensorrt_llm): ensemble tensor '_input_lengths' is already produced by "
     "step 1 (tiny-preprocessing)"),
    ("output-produced-by-no-step", lambda f: edit(f, ENS, 'output_map { key: "text" value: "text_output" }',
                                                  'output_map { key: "text" value: "_text" }'),
     "tiny/config.pbtxt: ensemble output 'text_output' is produced by no step"),
    ("unknown-step-model", lambda f: edit(f, ENS, 'model_name: "tiny-postprocessing"', 'model_name: "tiny-post"'),
     "tiny/config.pbtxt: step 3 (tiny-post): no model 'tiny-post' in the repository"),
    ("unused-ensemble-input", lambda f: edit(f, ENS, 'input_map { key: "seed" value: "seed" }', ""),
     "tiny/config.pbtxt: ensemble input 'seed' is read by no step"),
    ("two-decoupled-origins", lambda f: edit(edit(f, PRE, 'backend: "python"',
                                                  'backend: "python"\nmodel_transaction_policy { decoupled: true }'),
                                             TRT, "decoupled: false", "decoupled: true"),
     "tiny/config.pbtxt: step 3 (tiny-postprocessing): inputs come from different decoupled models "
     "['tiny-preprocessing', 'tiny-tensorrt_llm']"),
    ("device-sets-vs-instances", lambda f: edit(f, TRT, "count: 1 kind: KIND_CPU", "count: 2 kind: KIND_CPU"),
     "tiny-tensorrt_llm/config.pbtxt: gpu_device_ids '0' has 1 device set(s) for 2 instance(s)"),
    ("name-differs-from-directory", lambda f: edit(f, PRE, 'name: "tiny-preprocessing"', 'name: "preprocessing"'),
     "tiny-preprocessing/config.pbtxt: name 'preprocessing' differs from its directory 'tiny-preprocessing'"),
    ("no-version-directory", lambda f: {k: v for k, v in f.items() if k != "tiny-tensorrt_llm/1/README"},
     "tiny-tensorrt_llm/config.pbtxt: no version directory 1/"),
    ("python-model-without-code", lambda f: {k: v for k, v in f.items() if k != "tiny-bls/1/model.py"},
     "tiny-bls/config.pbtxt: a Python-backend model needs 1/model.py"),
    ("delay-with-preserve-ordering", lambda f: edit(edit(f, TRT, "timeout_action: REJECT", "timeout_action: DELAY"),
                                                    TRT, "max_queue_delay_microseconds: 100",
                                                    "max_queue_delay_microseconds: 100\n  preserve_ordering: true"),
     "tiny-tensorrt_llm/config.pbtxt: a DELAY timeout action cannot be combined with preserve_ordering"),
    ("parameter-set-twice", lambda f: edit(f, TRT, '{ key: "gpu_device_ids" value: { string_value: "0" } }',
                                           '{ key: "gpu_device_ids" value: { string_value: "0" } },\n'
                                           '  { key: "gpu_device_ids" value: { string_value: "1" } }'),
     "tiny-tensorrt_llm/config.pbtxt: parameter 'gpu_device_ids' is set 2 times"),
    # what the pinned TensorRT-LLM backend reads (compiler/actions/data/tensorrtllm_backend.json)
    ("backend-parameter-without-fallback", lambda f: edit(f, TRT, '  { key: "tokenizer_dir" value: { string_value: "" } },\n', ""),
     "tiny-tensorrt_llm/config.pbtxt: parameter 'tokenizer_dir' is missing; the tensorrtllm backend reads it "
     "without a fallback and the model does not load"),
    ("backend-input-renamed", lambda f: edit(edit(f, TRT, 'name: "seed"', 'name: "random_seed"'),
                                             ENS, 'key: "seed" value: "seed"', 'key: "random_seed" value: "seed"'),
     "tiny-tensorrt_llm/config.pbtxt: input 'random_seed' is not read by the tensorrtllm backend"),
    ("backend-scalar-without-reshape", lambda f: edit(f, TRT, 'name: "input_lengths"\n    data_type: TYPE_INT32\n'
                                                              '    dims: [ 1 ]\n    reshape: { shape: [ ] }\n',
                                                      'name: "input_lengths"\n    data_type: TYPE_INT32\n'
                                                      '    dims: [ 1 ]\n'),
     "tiny-tensorrt_llm/config.pbtxt: input 'input_lengths' needs reshape: { shape: [] }: the tensorrtllm backend "
     "splits a request's prompts along the batch dimension and reads one value per prompt"),
    ("backend-input-type", lambda f: edit(f, TRT, 'name: "seed"\n    data_type: TYPE_UINT64',
                                          'name: "seed"\n    data_type: TYPE_INT64'),
     "tiny-tensorrt_llm/config.pbtxt: input 'seed' is TYPE_INT64; the tensorrtllm backend reads TYPE_UINT64"),
    ("backend-parameter-unparsable", lambda f: edit(f, TRT, '{ key: "enable_kv_cache_reuse" value: { string_value: "true" } }',
                                                    '{ key: "enable_kv_cache_reuse" value: { string_value: "yes" } }'),
     "tiny-tensorrt_llm/config.pbtxt: parameter enable_kv_cache_reuse='yes' is not a bool the tensorrtllm backend "
     "can read"),
    ("backend-parameter-value", lambda f: edit(f, TRT, '{ key: "gpt_model_type" value: { string_value: "inflight_fused_batching" } }',
                                               '{ key: "gpt_model_type" value: { string_value: "inflight" } }'),
     "tiny-tensorrt_llm/config.pbtxt: parameter gpt_model_type='inflight' is not one of"),
    ("backend-parameter-unknown", lambda f: edit(f, TRT, '{ key: "tokenizer_dir" value: { string_value: "" } }',
                                                 '{ key: "tokenizer_dir" value: { string_value: "" } },\n'
                                                 '  { key: "max_num_tokens" value: { string_value: "8192" } }'),
     "tiny-tensorrt_llm/config.pbtxt: parameter 'max_num_tokens' is not read by the tensorrtllm backend"),
    ("backend-output-missing", lambda f: edit(edit(f, TRT, 'output [\n  {\n    name: "output_ids"\n    data_type: TYPE_INT32\n'
                                                            '    dims: [ -1, -1 ]\n  },\n', 'output [\n'),
                                              ENS, 'output_map { key: "output_ids" value: "_output_ids" }\n', ""),
     "tiny-tensorrt_llm/config.pbtxt: output 'output_ids' is missing; the tensorrtllm backend needs it"),
    ("oneof-broken", lambda f: edit(f, ENS, "ensemble_scheduling {", "dynamic_batching { }\nensemble_scheduling {"),
     'tiny/config.pbtxt:108:1: not a valid Triton model configuration: Field "ensemble_scheduling" is specified '
     'along with field "dynamic_batching", another member of oneof "scheduling_choice"'),
]


@pytest.mark.parametrize("case,breaker,expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_rule_reports_a_broken_repository(case: str, breaker, expected: str) -> None:
    good = quick_engine()
    assert rules.check_repository(good) == []
    problems = rules.check_repository(breaker(good))
    assert any(expected in p for p in problems), problems
    with pytest.raises(ConfigProblem) as e:
        rules.verify_repository(breaker(good))
    assert expected in str(e.value)


def test_parse_error_names_file_line_and_column() -> None:
    with pytest.raises(ConfigProblem, match=r"^m/config.pbtxt:2:17: not a valid Triton model configuration"):
        parse("m/config.pbtxt", 'name: "m"\nmax_batch_size: "eight"\n')


# --- the action ---------------------------------------------------------------------------------
def run_action(spec_path: Path, host: str, checkpoint: Path, tmp: Path) -> Path:
    """Lower the spec and run triton-repo/<host> with its real llmapi-options dependency; the
    checkpoint dependency is a directory holding the checkpoint's tokenizer files."""
    result = validate_path(spec_path)
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    graph = lower(result, DigestCache(None))
    action = graph.actions[f"triton-repo/{host}"]
    log = logging.getLogger("test-triton-repo")
    deps = {}
    for dep in action.deps:
        if dep.startswith("llmapi-options/"):
            d = tmp / dep.replace("/", "_")
            d.mkdir(parents=True)
            REGISTRY["llmapi-options"].run(graph.actions[dep].params, RunContext(d, {}, {}, log))
            deps[dep] = d
        else:
            deps[dep] = checkpoint
    out = tmp / "out"
    out.mkdir()
    REGISTRY[action.kind].run(action.params, RunContext(out, {}, deps, log))
    return out


def quickstart_copy(tmp: Path, target: str, one_model: bool = False) -> Path:
    """A copy of the quickstart on `target`; `one_model` keeps only `tiny` (the server tests)."""
    from tests.quickstart import on_engine_target, only_tiny

    dest = tmp / "spec"
    shutil.copytree(EXAMPLES / "quickstart", dest, ignore=shutil.ignore_patterns("*.safetensors"))
    text = (dest / "kiln.yaml").read_text(encoding="utf-8")
    if one_model:
        text = only_tiny(text)
    if target == "engine":
        text = on_engine_target(text)
    (dest / "kiln.yaml").write_text(text, encoding="utf-8")
    return dest / "kiln.yaml"


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", tr.TARGETS)
def test_action_writes_the_rendered_repository_with_the_checkpoint_tokenizer(target: str, tmp_path: Path) -> None:
    out = run_action(quickstart_copy(tmp_path, target), "dev-h100", QUICK_MODEL, tmp_path)
    files = tree(out)
    params, expected = rendered("quickstart", "dev-h100", target)
    assert rules.check_repository(files) == []
    tokenizer_names = {f.name for f in triton_repo.tokenizer_files(QUICK_MODEL)}
    assert tokenizer_names == {"tokenizer.json", "tokenizer_config.json"}
    for where in tr.tokenizer_dirs(params):
        for name in tokenizer_names:
            assert files.pop(f"{where}/{name}") == (QUICK_MODEL / name).read_bytes()
    assert files == expected  # the action adds exactly the tokenizer files to the pure rendering


def test_action_refuses_a_checkpoint_without_tokenizer(tmp_path: Path) -> None:
    empty = tmp_path / "ckpt"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(triton_repo.RepositoryError, match="has no tokenizer files"):
        run_action(quickstart_copy(tmp_path, "engine"), "dev-h100", empty, tmp_path)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_serving_change_moves_only_the_repository_key(tmp_path: Path) -> None:
    spec = quickstart_copy(tmp_path, "llmapi")
    before = lower(validate_path(spec), DigestCache(None))
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("max_queue_size: 16", "max_queue_size: 32"), encoding="utf-8")
    after = lower(validate_path(spec), DigestCache(None))
    changed = {a for a in before.keys if before.keys[a] != after.keys.get(a)}
    assert changed == {"triton-repo/dev-h100", "spec-snapshot"}


# --- golden files -------------------------------------------------------------------------------
@pytest.mark.parametrize("target", tr.TARGETS)
def test_golden_repository(target: str, update_expectations: bool) -> None:
    """The quickstart's repository per target, frozen (tokenizer files excepted: they are copied
    bytes). Regenerate with `pytest --update-expectations` and review the diff."""
    _, files = rendered("quickstart", "dev-h100", target)
    where = GOLDEN / target
    if update_expectations:
        shutil.rmtree(where, ignore_errors=True)
        for rel, data in files.items():
            (where / rel).parent.mkdir(parents=True, exist_ok=True)
            (where / rel).write_bytes(data)
    assert where.is_dir(), f"no golden repository for {target}: run pytest --update-expectations"
    assert tree(where) == files, f"{where} differs from the generated repository; review and --update-expectations"


def test_the_engine_models_header_says_its_queue_timeout_never_fires() -> None:
    """Serving review D6: the backend hands every request to its executor at once, so Triton's queue
    policy on <m>-tensorrt_llm bounds the queue but its timeout never fires; the header must not
    call that policy the admission control, and names the model whose admission enforces it."""
    _, files = rendered("quickstart", "dev-h100", "engine")
    name = next(rel for rel in files if rel.endswith("-tensorrt_llm/config.pbtxt"))
    header = " ".join(line[2:] for line in files[name].decode().splitlines() if line.startswith("# "))
    assert "Admission control: the queue policy below." not in header
    model = name.split("-tensorrt_llm/")[0]
    assert "its timeout never fires" in header and f"send to {model}-bls" in header


def test_action_refuses_templates_edited_after_planning(tmp_path: Path) -> None:
    result = validate_path(quickstart_copy(tmp_path, "engine"))
    graph = lower(result, DigestCache(None))
    params = graph.actions["triton-repo/dev-h100"].params
    params = params.model_copy(update={"templates": {**params.templates, "engine/bls.py": "sha256:" + "0" * 64}})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(triton_repo.RepositoryError, match="template changed"):
        triton_repo.KIND.run(params, RunContext(out, {}, {}, logging.getLogger("t")))
    assert "engine/preprocessing.py" in params.templates and "llmapi/model.py" not in params.templates


# --- what the pinned TensorRT-LLM backend reads -------------------------------------------------
ENGINE_CASES = [(e, h) for e, h, t in CASES if t == "engine"]


@pytest.mark.parametrize("example,host", ENGINE_CASES, ids=[f"{e}-{h}" for e, h in ENGINE_CASES])
def test_every_engine_repository_supplies_what_the_pinned_backend_reads(example: str, host: str) -> None:
    """Each parameter the backend reads without a fallback is there, every parameter and tensor is
    one the backend reads, with its type; per-prompt scalars are reshaped to [] (facts: the data file
    compiler/actions/data/tensorrtllm_backend.json, from the TensorRT-LLM 1.2.x sources it cites)."""
    params, files = rendered(example, host, "engine")
    facts = backend.facts()
    assert facts.source["repository"] == "NVIDIA/TensorRT-LLM" and "1.2" in facts.source["version"]
    mc = __import__("tritonclient.grpc.model_config_pb2", fromlist=["x"])
    for m in params.models:
        config = parse("x", files[f"{m.name}-tensorrt_llm/config.pbtxt"].decode())
        assert config.backend == backend.BACKEND
        p = {k: v.string_value for k, v in config.parameters.items()}
        required = {name for name, spec in facts.parameters.items() if spec["required"]}
        assert required == {"gpt_model_type", "gpt_model_path", "tokenizer_dir", "xgrammar_tokenizer_info_path",
                            "guided_decoding_backend"}
        assert required <= set(p), required - set(p)
        for name, value in p.items():
            spec = facts.parameters[name]
            assert backend.parses_as(spec["type"], value), (name, value)
            assert value in spec.get("values", [value]), (name, value)
        inputs = {t.name: t for t in config.input}
        assert {n for n, spec in facts.inputs.items() if spec["required"]} <= set(inputs)
        for name, t in inputs.items():
            spec = facts.inputs[name]
            assert mc.DataType.Name(t.data_type) == spec["data_type"] and list(t.dims) == spec["dims"], name
            assert (list(t.reshape.shape) if t.HasField("reshape") else None) == spec["reshape"], name
        assert "seed" in inputs and "random_seed" not in inputs
        assert {n for n, spec in facts.outputs.items() if spec["required"]} <= {t.name for t in config.output}
        assert backend.check(config) == []


def test_gpt_model_path_is_where_the_engine_action_puts_the_engine(tmp_path: Path, monkeypatch) -> None:
    """The engine artifact is copied to /opt/kiln/models/<model> in the image; the backend must be
    pointed at the directory of its config.json, not the artifact's root. trtllm-build needs a GPU:
    here it is stood in by writing what Engine.save writes (config.json, rank0.engine)."""
    import json

    from compiler.actions import engine
    from compiler.serving.layout import model_dir
    from tests.test_engine_recipe import engine_actions, engine_config

    plan = engine_actions(tmp_path)
    action = plan.graph.actions["engine/tiny"]

    def build(params, source, calib, ckpt, engine_dir, ctx):  # what trtllm-build leaves behind
        engine_dir.mkdir(parents=True)
        (engine_dir / "config.json").write_text(json.dumps(engine_config(params)), encoding="utf-8")
        (engine_dir / "rank0.engine").write_bytes(b"\0")

    monkeypatch.setattr(engine, "_has_trtllm", lambda: True)
    monkeypatch.setattr(engine, "_run_local", build)
    calib = tmp_path / "calib"
    calib.mkdir()
    (calib / "calibration.jsonl").write_text('{"text": "x"}\n', encoding="utf-8")
    out = tmp_path / "artifact"
    out.mkdir()
    files = {f"source/{p.name}": p for p in QUICK_MODEL.iterdir()}
    engine.run(action.params, RunContext(out, files, {"calibration-set/tiny": calib}, logging.getLogger("t")))
    (found,) = [p.relative_to(out) for p in out.rglob("config.json")]
    in_image = f"{model_dir('tiny')}/{found.parent.as_posix()}"
    _, repo_files = rendered("quickstart", "dev-h100", "engine")
    config = parse("x", repo_files["tiny-tensorrt_llm/config.pbtxt"].decode())
    assert config.parameters["gpt_model_path"].string_value == in_image == f"/opt/kiln/models/tiny/{ENGINE_SUBDIR}"


LLMAPI_CASES = [(e, h) for e, h, t in CASES if t == "llmapi"]


@pytest.mark.parametrize("example,host", LLMAPI_CASES, ids=[f"{e}-{h}" for e, h in LLMAPI_CASES])
def test_llmapi_models_have_the_tensors_of_tensorrt_llm_s_own_llmapi_model(example: str, host: str) -> None:
    """Names, types and shapes of all_models/llmapi/tensorrt_llm/config.pbtxt (TensorRT-LLM 1.2.x, as
    recorded in compiler/actions/data/trtllm_llmapi.json), so that model's clients work unchanged."""
    import json

    want = json.loads((ROOT / "compiler" / "actions" / "data" / "trtllm_llmapi.json").read_text())["triton_model"]
    mc = __import__("tritonclient.grpc.model_config_pb2", fromlist=["x"])
    params, files = rendered(example, host, "llmapi")
    for m in params.models:
        config = parse("x", files[f"{m.name}/config.pbtxt"].decode())
        assert config.max_batch_size == want["max_batch_size"]
        for kind, tensors in (("inputs", config.input), ("outputs", config.output)):
            have = {t.name: {"data_type": mc.DataType.Name(t.data_type), "dims": list(t.dims)} for t in tensors}
            assert have == {n: {"data_type": s["data_type"], "dims": s["dims"]} for n, s in want[kind].items()}, kind
        assert {t.name for t in config.input if not t.optional} == {"text_input"}


# --- multi-rank engines (issue 22, item 1 of the review) ----------------------------------------
def test_a_multi_rank_engine_runs_one_tritonserver_per_rank_under_mpirun() -> None:
    """The TensorRT-LLM backend is in leader mode over the MPI world unless TRTLLM_ORCHESTRATOR is
    set, and the executor checks that world's size is tp * pp: one plain tritonserver would not
    load a tp=8 engine. Upstream's launch_triton_server.py starts one per rank under mpirun."""
    from compiler.actions import runtimes
    from compiler.runtimes import Unit

    ports = {"http": 8000, "grpc": 8001, "metrics": 8002}
    single = runtimes.unit_serving("triton", "engine", "m", ports, tp=1)
    assert single.command[0] == "tritonserver" and single.ranks == 1
    serving = runtimes.unit_serving("triton", "engine", "m", ports, tp=4, pp=2, gpus=8)
    assert serving.ranks == 8 and serving.command[:2] == ["mpirun", "--allow-run-as-root"]
    triton = runtimes.get("triton")
    ranks = triton.rank_commands(serving.command)
    assert len(ranks) == 8 and all(argv[0] == "tritonserver" for argv in ranks)
    assert all(runtimes.check_command("triton", argv) == [] for argv in ranks)
    assert [a for a in ranks[0] if a.startswith("--load-model=")] == [
        f"--load-model={m}" for m in triton.loaded_models(Unit(model="m", target="engine", ports=ports))]
    for rank, argv in enumerate(ranks):
        assert f"--backend-config=python,shm-region-prefix-name=prefix{rank}_" in argv
        if rank:
            assert [a for a in argv if a.startswith("--load-model=")] == ["--load-model=m-tensorrt_llm"]
    # the llmapi target and trtllm-serve start their own MPI workers: one process
    assert runtimes.unit_serving("triton", "llmapi", "m", ports, tp=8, gpus=8).command[0] == "tritonserver"
    # the engine model's config says so, and no longer claims the backend places its ranks itself
    _, files = rendered("h200-tp8-llama70b", "h200-node", "engine")
    config = next(v.decode() for k, v in files.items() if k.endswith("-tensorrt_llm/config.pbtxt"))
    assert "places its ranks itself" not in config
    assert "starts 8 tritonserver ranks under mpirun" in config


# --- the BLS's admission, on its own (the server test covers it under Triton) -------------------
def bls_admission():
    """The Admission class of the BLS model.py, without Triton's Python-backend module (it uses none)."""
    import ast
    import collections
    import itertools
    import threading
    import time

    source = (tr.TEMPLATE_DIR / "engine" / "bls.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    keep = [n for n in tree.body if (isinstance(n, ast.ClassDef) and n.name in ("Admission", "Job"))
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", "").startswith("QUEUE_") for t in n.targets))]
    scope = {"collections": collections, "itertools": itertools, "threading": threading, "time": time}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "bls.py", "exec"), scope)
    return scope["Admission"]


def test_bls_admission_passes_slots_in_order_and_bounds_the_queue() -> None:
    """Slots (2), requests sent on ahead of a slot (headroom 1), a bounded queue (2): slots go to the
    oldest request sent on, places ahead to the oldest waiting one; one that gets no slot within the
    timeout is rejected and, if it was sent on, stopped in the engine."""
    import threading

    started, rejected, stopped = [], [], []
    Admission = bls_admission()
    admission = Admission(2, 1, 2, 0, start=started.append, stop=stopped.append,
                          reject=lambda job, why: rejected.append((job.request, why)))
    for request in "abcdef":
        admission.submit(request)

    def names():
        return [job.request for job in started]
    assert names() == ["a", "b", "c"] and rejected == [("f", "Exceeds maximum queue size")]
    assert [job.stage for job in started] == ["slot", "slot", "ahead"]
    admission.done(started[0])  # a slot frees: c (sent on) takes it, d is sent on in its place
    assert names() == ["a", "b", "c", "d"] and [started[2].stage, started[3].stage] == ["slot", "ahead"]
    admission.done(started[3])  # one ahead ends without a slot: the next waiting one is sent on
    assert names() == ["a", "b", "c", "d", "e"] and started[4].stage == "ahead"
    admission.done(started[1]), admission.done(started[2])  # e takes a slot; the other is free
    assert admission.holding == 1 and not admission.ahead and not admission.waiting
    admission.close("unloading")
    admission.submit("g")
    assert rejected[-1] == ("g", "unloading") and stopped == []

    seen = threading.Semaphore(0)
    out = []
    timed = Admission(1, 1, 0, 0.05, start=out.append, stop=lambda job: (stopped.append(job), seen.release()),
                      reject=lambda job, why: rejected.append((job.request, why)))
    timed.submit("h")  # holds the slot
    timed.submit("i")  # sent on ahead of it (no queue bound: max_queue 0)
    assert seen.acquire(timeout=30)  # no slot in time: rejected (answered first), then stopped
    assert rejected[-1] == ("i", "Request timeout expired") and [job.request for job in stopped] == ["i"]
    timed.submit("j")  # the place ahead is free again: sent on at once, and stopped in its turn
    assert [job.request for job in out] == ["h", "i", "j"]
    assert seen.acquire(timeout=30)
    assert rejected[-1] == ("j", "Request timeout expired") and [job.request for job in stopped] == ["i", "j"]
    timed.done(out[0])
    assert timed.holding == 0 and out[0].stage == "gone"
    timed.close("unloading")
