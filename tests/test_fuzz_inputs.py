"""Property tests of the two inputs a team adds beside a spec (issue 36): a captured `nvidia-smi mig
-lgip` / `-lgipp` given to `--gpu-profiles`, and a model's config.json read by `kiln plan`.

Inputs are mutations of real files (the captures under tests/data/lgip, the quickstart's
config.json): lines dropped, doubled, swapped or cut, tokens replaced by extreme numbers and odd
names, placement lines appended; config keys set to zero, negative, huge, fractional or
wrong-typed values, or removed. Each runs through the command line in process (`kiln validate
--gpu-profiles`, `kiln plan`); a crash is an exit code other than 0 or 1, an "internal error", or
any exception. benchmarks/fuzz_inputs.py runs the same cases for as many inputs as asked and
prints the counts; here a small seeded sample runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
LGIP = ROOT / "tests" / "data" / "lgip"
H100_LGIP = (LGIP / "h100-sxm5-80gb.lgip.txt").read_text(encoding="utf-8")
H100_LGIPP = (LGIP / "h100-sxm5-80gb.lgipp.txt").read_text(encoding="utf-8")
# (files of one --gpu-profiles): the H100 fits the quickstart's host; the others fit no host
CAPTURE_BASES = [
    (H100_LGIP,), (H100_LGIP, H100_LGIPP), (H100_LGIPP + "\n" + H100_LGIP,), (H100_LGIPP, H100_LGIP),
    ((LGIP / "a30-24gb.lgipp-and-lgip.txt").read_text(encoding="utf-8"),),
    ((LGIP / "a100-sxm4-80gb-7g79gb.lgip.txt").read_text(encoding="utf-8"),),
    ((LGIP / "rtx-pro-6000-server.lgip.txt").read_text(encoding="utf-8"),),
]
TOKENS = ["0", "1", "-1", "7", "19", "99", "77", "15", "3", "1e308", "999999999", "42", "14", "0/0", "9/1", "99999/99999", "99999999999999999999", "4294967296", "0.0", "0.5",
          "nan", "inf", "7g.80gb", "1g.10gb", "1g.10gb+me", "1g.20gb", "0g.0gb", "999g.99999gb", "4g.40gb-me",
          "MIG", "Yes", "No", "|", "{", "}", "{}", "{0,1}:1", ":", "", "GPU", "\u00e9", "\x00", "\t"]
CONFIG = json.loads((QUICKSTART / "model" / "config.json").read_text(encoding="utf-8"))
CONFIG_KEYS = sorted(CONFIG) + [
    "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "shared_expert_intermediate_size", "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers",
    "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank", "sliding_window",
    "use_sliding_window", "layer_types", "max_window_layers", "multi_query", "num_parameters",
    "initial_context_length", "rope_scaling_factor", "rope_scaling", "quantization_config", "n_layer", "n_embd"]
CONFIG_VALUES = st.one_of(
    st.sampled_from([0, 1, -1, 2, 3, 4, 7, 8, 64, 1e308, -1e308, 1e6, 10 ** 6, 10 ** 9, 2 ** 31, 2 ** 63, 10 ** 30,
                     0.5, 1.0, 8.0, 4.000001, True, False, None, "", "x", "llama", "gpt_oss", "qwen2", [], {}, [1],
                     ["sliding_attention"] * 4, {"type": "yarn", "factor": 1e308}, {"quant_method": "fp8"}]),
    st.integers(-(10 ** 12), 10 ** 12), st.floats(allow_nan=False), st.text(max_size=6))


# --- cases ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaptureCase:
    files: tuple[str, ...]


@dataclass(frozen=True)
class ConfigCase:
    config: object  # what config.json holds (any JSON value)
    raw: str | None = None  # text written instead of the JSON dump (a cut or edited file)


def _edit_lines(text: str, ops: list[tuple]) -> str:
    lines = text.split("\n")
    for op in ops:
        if not lines:
            break
        i = op[1] % len(lines)
        if op[0] == "drop":
            del lines[i]
        elif op[0] == "dup":
            lines.insert(i, lines[i])
        elif op[0] == "swap":
            j = op[2] % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif op[0] == "token":
            parts = re.split(r"(\s+)", lines[i])  # spacing kept: a column's token is replaced in place
            words = [k for k, p in enumerate(parts) if p and not p.isspace()] or [0]
            parts[words[op[2] % len(words)]] = op[3]
            lines[i] = "".join(parts)
        elif op[0] == "cell":  # a cell of a profile block's first row (GPU, name, ID, free/total, GiB, ...)
            rows = [k for k, line in enumerate(lines) if _PROFILE_ROW.match(line)]
            if rows:
                k = rows[op[1] % len(rows)]
                parts = re.split(r"(\s+)", lines[k])
                words = [w for w, p in enumerate(parts) if p and not p.isspace() and p not in ("|", "MIG")]
                parts[words[op[2] % len(words)]] = op[3]
                lines[k] = "".join(parts)
        elif op[0] == "insert":
            lines.insert(i, op[2])
        elif op[0] == "lgipp":
            lines.insert(i, f"GPU {op[2]} Profile ID {op[3]} Placements: {{{op[4]}}}:{op[5]}")
    text = "\n".join(lines)
    cut = [op for op in ops if op[0] == "cut"]
    return text[: cut[0][1] % (len(text) + 1)] if cut else text


_PROFILE_ROW = re.compile(r"^\|\s+\d+\s+MIG ")
_NUM = st.sampled_from(TOKENS[:17])
LINE_OPS = st.one_of(
    st.tuples(st.just("cell"), st.sampled_from(range(8)), st.sampled_from(range(9)), st.sampled_from(TOKENS)),
    st.tuples(st.just("cell"), st.sampled_from(range(8)), st.sampled_from(range(9)), st.sampled_from(TOKENS)),
    st.tuples(st.just("drop"), st.integers(0, 200)),
    st.tuples(st.just("dup"), st.integers(0, 200)),
    st.tuples(st.just("swap"), st.integers(0, 200), st.integers(0, 200)),
    st.tuples(st.just("token"), st.integers(0, 200), st.integers(0, 30), st.sampled_from(TOKENS)),
    st.tuples(st.just("insert"), st.integers(0, 200), st.text(max_size=40)),
    st.tuples(st.just("lgipp"), st.integers(0, 200), _NUM, _NUM, st.sampled_from(["", "0", "0,1,2", "9999999", "-1",
                                                                                   "0,0,0", "1e308"]), _NUM),
    st.tuples(st.just("cut"), st.integers(0, 5000)),
)


@st.composite
def capture_cases(draw) -> CaptureCase:
    base = draw(st.sampled_from(CAPTURE_BASES))
    return CaptureCase(tuple(_edit_lines(text, draw(st.lists(LINE_OPS, max_size=6))) for text in base))


@st.composite
def config_cases(draw) -> ConfigCase:
    doc = dict(CONFIG)
    for key, value in draw(st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), st.one_of(st.just(...), CONFIG_VALUES)),
                                    min_size=1, max_size=5)):
        if value is ...:
            doc.pop(key, None)
        else:
            doc[key] = value
    shape = draw(st.sampled_from(["object"] * 8 + ["cut", "not-object"]))
    if shape == "not-object":
        return ConfigCase(draw(st.sampled_from([[], None, 1, "llama", [doc]])))
    if shape == "cut":
        text = json.dumps(doc)
        return ConfigCase(doc, text[: draw(st.integers(0, len(text)))])
    return ConfigCase(doc)


# --- running one -----------------------------------------------------------------------------------
class Harness:
    """A scratch copy of the quickstart (spec, data, model) and a store, shared by every input."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="kiln-fuzz-inputs-")
        root = Path(self._dir.name)
        shutil.copytree(QUICKSTART, root / "spec")
        self.spec = root / "spec" / "kiln.yaml"
        self.config = root / "spec" / "model" / "config.json"
        self.store = root / "store"
        self.captures = [root / "capture-a.txt", root / "capture-b.txt"]

    def close(self) -> None:
        self._dir.cleanup()

    def _kiln(self, *argv: str) -> str | None:
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(list(argv))
        except BaseException:  # noqa: BLE001 - anything escaping the command line is the defect
            return traceback.format_exc()
        said = err.getvalue()
        if int(code) not in (0, 1) or "internal error" in said or "Traceback" in said:
            return f"exit {int(code)}\n{said[-2000:]}"
        return None

    def run_capture(self, case: CaptureCase) -> str | None:
        paths = self.captures[: len(case.files)]
        for path, text in zip(paths, case.files):
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
        return self._kiln("validate", str(self.spec), "--gpu-profiles", *map(str, paths))

    def run_config(self, case: ConfigCase) -> str | None:
        text = case.raw if case.raw is not None else json.dumps(case.config)
        self.config.write_text(text, encoding="utf-8")
        return self._kiln("plan", str(self.spec), "--store", str(self.store))


# --- the seeded sample -------------------------------------------------------------------------------
_harness = Harness()


def teardown_module() -> None:
    _harness.close()


@seed(36)
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(capture_cases())
def test_any_capture_gives_validate_an_answer_not_a_crash(case: CaptureCase) -> None:
    problem = _harness.run_capture(case)
    assert problem is None, f"{case}\n{problem}"


@seed(36)
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(config_cases())
def test_any_config_json_gives_plan_an_answer_not_a_crash(case: ConfigCase) -> None:
    problem = _harness.run_config(case)
    assert problem is None, f"{case}\n{problem}"
