"""Triton model repositories (`triton-repo`) for every example and both targets, checked with
Triton's own protobuf schema (tritonclient.grpc.model_config_pb2, strict text-format parsing) and
Triton's cross-model rules; each rule is also shown to fire on a deliberately broken repository.
The real server test is tests/test_triton_server.py.
"""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path

import pytest

from compiler.actions import REGISTRY, llmapi, triton_repo
from compiler.graph.inputs import DigestCache
from compiler.graph.kinds import RunContext
from compiler.lower import lower
from compiler.pipeline import validate_path
from compiler.serving import rules
from compiler.serving import triton as tr
from compiler.serving.pbtxt import ConfigProblem, parse, parse_repository

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden" / "triton"
EXAMPLE_NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "kiln.yaml").is_file())
QUICK_MODEL = EXAMPLES / "quickstart" / "model"


@functools.lru_cache(maxsize=None)
def validated(example: str):
    result = validate_path(EXAMPLES / example / "kiln.yaml")
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    return result


def rendered(example: str, host: str, target: str) -> tuple[dict, dict[str, bytes]]:
    """The repository's rendered files (no tokenizers) for the example, its target set to `target`."""
    r = validated(example)
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
    spec = validated(example).spec
    per_model = 1 if target == "llmapi" else 5
    assert len(configs) == per_model * len(params.models)
    assert all(b"${" not in data for data in files.values())
    assert rules.check_repository(with_tokenizers(params, files)) == []

    mc = __import__("tritonclient.grpc.model_config_pb2", fromlist=["x"])
    by_name = {c.model_dir: c.config for c in configs}
    units = [u for u in validated(example).resolved.units if u.host == host]
    for m in params.models:
        model = spec.models[m.name]
        s = model.serving
        width = model.parallelism.tp * model.parallelism.pp
        assert {len(u.gpu_indexes) for u in units if u.model == m.name} == {width}
        # the model that meets the engine (or the LLM API) carries batching and admission control
        front = by_name[m.name if target == "llmapi" else f"{m.name}-tensorrt_llm"]
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
            p = {k: v.string_value for k, v in front.parameters.items()}
            assert p["gpt_model_path"] == f"/opt/kiln/models/{m.name}"
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
     "tiny-tensorrt_llm/config.pbtxt:7:17: not a valid Triton model configuration: "
     "'max_batch_size: ${triton_max_batch_size}': Couldn't parse integer: $"),
    ("placeholder-in-string", lambda f: edit(f, TRT, '"/opt/kiln/models/tiny"', '"${engine_dir}"'),
     "tiny-tensorrt_llm/config.pbtxt:131: a template placeholder `${...}` survived"),
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
    ("unused-ensemble-input", lambda f: edit(f, ENS, 'input_map { key: "random_seed" value: "seed" }', ""),
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
    ("oneof-broken", lambda f: edit(f, ENS, "ensemble_scheduling {", "dynamic_batching { }\nensemble_scheduling {"),
     'tiny/config.pbtxt:104:1: not a valid Triton model configuration: Field "ensemble_scheduling" is specified '
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
