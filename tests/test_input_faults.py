"""Spec content and command-line arguments that used to crash (exit 3), hang or print library
warnings (issue 17, items 7, 8 and 10): each is now a positioned diagnostic or a one-line usage
error, through the real command line."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart" / "kiln.yaml"
TEXT = QUICKSTART.read_text(encoding="utf-8")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return int(code), out.out, out.err


def _kiln(*argv: str, timeout: float = 60, memory: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "compiler", *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=limit)


# --- item 7: spec content -------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["%YAML 1.3\n---\n", "%YAML 2.0\n---\n", "%YAML 1.1\n---\n",
                                    "kiln: v1\n---\n%YAML 1.3\n---\n"])
def test_a_yaml_directive_the_loader_does_not_support_is_a_diagnostic(tmp_path: Path, capsys, prefix: str) -> None:
    spec = tmp_path / "kiln.yaml"
    spec.write_text(prefix + TEXT, encoding="utf-8")
    code, out, err = _run(capsys, "validate", str(spec))
    assert code == 1 and "[K014]" in out and "internal error" not in err, out + err
    line = prefix.count("\n", 0, prefix.index("%YAML")) + 1
    assert f"kiln.yaml:{line}:1: error: %YAML" in out


def test_yaml_1_2_stays_accepted(tmp_path: Path, capsys) -> None:
    shutil.copytree(QUICKSTART.parent, tmp_path / "q")
    spec = tmp_path / "q" / "kiln.yaml"
    spec.write_text("%YAML 1.2\n---\n" + TEXT, encoding="utf-8")
    code, out, err = _run(capsys, "validate", str(spec))
    assert code == 0, out + err


def test_names_longer_than_the_filesystem_allows_are_usage_errors(tmp_path: Path, capsys) -> None:
    long_name = str(tmp_path / ("x" * 300 + ".yaml"))
    for argv in (["validate", long_name], ["plan", long_name], ["build", long_name],
                 ["validate", str(QUICKSTART), "--output", str(tmp_path / ("o" * 300))],
                 ["validate", str(QUICKSTART), "--gpu-profiles", long_name], ["schema", "--output-dir", long_name],
                 ["schema", "--output-dir", str(QUICKSTART / "x")], ["store", "verify", "--store", long_name],
                 ["plan", str(QUICKSTART), "--store", long_name]):
        code, out, err = _run(capsys, *argv)
        assert code == 2 and err.startswith("kiln: error:") and "internal error" not in err, (argv, err)


def test_an_output_that_is_a_directory_is_a_usage_error_before_any_work(tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, "validate", str(QUICKSTART), "--output", str(tmp_path))
    assert code == 2 and "--output" in err and "is a directory" in err, err
    code, out, err = _run(capsys, "publish", str(QUICKSTART), "--store", str(tmp_path / "s"), "--commit", "1" * 40,
                          "--registry", "127.0.0.1:1/x", "--provenance", str(tmp_path))
    assert code == 2 and "--provenance" in err and "is a directory" in err, err


# --- item 8: an endless file ----------------------------------------------------------------------
def test_validate_reads_at_most_the_size_limit_of_an_endless_file() -> None:
    """/dev/zero says it is 0 bytes long and never ends: read the limit plus one byte, no more."""
    proc = _kiln("validate", "/dev/zero", timeout=60, memory=1 << 30)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "[K008]" in proc.stdout and "larger than 1048576 bytes" in proc.stdout


def test_a_huge_gpu_profiles_capture_is_read_no_further_than_a_capture_can_be(tmp_path: Path) -> None:
    huge = tmp_path / "lgip.txt"
    with open(huge, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB that take no disk
    proc = _kiln("validate", str(QUICKSTART), "--gpu-profiles", str(huge), timeout=60, memory=1 << 30)
    assert proc.returncode == 1 and "[K910]" in proc.stdout and "larger than" in proc.stdout, \
        proc.stdout + proc.stderr[-2000:]


# --- item 10: no library warning reaches stderr ---------------------------------------------------
def test_a_reused_anchor_is_a_diagnostic_not_a_library_warning(tmp_path: Path) -> None:
    shutil.copytree(QUICKSTART.parent, tmp_path / "q")
    spec = tmp_path / "q" / "kiln.yaml"
    spec.write_text(TEXT.replace("max_queue_size: 16, queue_timeout_ms: 1000}", "max_queue_size: &q 16, "
                                 "queue_timeout_ms: 1000}", 1)
                    .replace("max_queue_size: 16, queue_timeout_ms: 1000,", "max_queue_size: &q 16, "
                             "queue_timeout_ms: 1000,", 1), encoding="utf-8")
    assert spec.read_text().count("&q") == 2
    for argv in (["validate", str(spec)], ["plan", str(spec), "--store", str(tmp_path / "store")]):
        proc = _kiln(*argv)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Warning" not in proc.stderr and "warnings.warn" not in proc.stderr, proc.stderr
        assert "warning: anchor &q is already defined" in proc.stdout and "[K015]" in proc.stdout, proc.stdout


# --- issue 36: a capture without its placements, extreme config.json values ------------------------
def test_a_capture_without_placements_for_an_unknown_profile_id_is_k910_at_its_line(tmp_path: Path, capsys) -> None:
    """`-lgip` alone with a profile ID no catalog profile or ID pattern places crashed validate."""
    lgip = (ROOT / "tests" / "data" / "lgip" / "h100-sxm5-80gb.lgip.txt").read_text(encoding="utf-8")
    assert "1g.10gb       19     7/7" in lgip
    capture = tmp_path / "h100.lgip.txt"
    capture.write_text(lgip.replace("1g.10gb       19     7/7", "1g.10gb       77     7/7"), encoding="utf-8")
    code, out, err = _run(capsys, "validate", str(QUICKSTART), "--gpu-profiles", str(capture))
    assert code == 1 and "Traceback" not in err, out + err
    assert f"{capture}:6:1: error: cannot use the capture for H100-SXM5-80GB: no placements known for profile " \
           "ID 77" in out, out
    assert "K911" not in out  # the capture fits the host: no "taken on a GPU no host uses" beside it


@pytest.mark.parametrize("key, value, says", [
    ("num_attention_heads", 1e308, "num_attention_heads: must be <= 4,096"),
    ("hidden_size", 1e308, "hidden_size: must be <= 262,144"),
    ("num_hidden_layers", 10 ** 6, "num_hidden_layers: must be <= 4,096"),
    ("vocab_size", 2 ** 63, "vocab_size: must be <="),
])
def test_a_config_json_with_extreme_values_is_k903_not_a_crash_or_a_stall(tmp_path: Path, capsys, key, value,
                                                                        says) -> None:
    """1e308 heads overflowed (exit 3); 10^6 layers took plan 73 s walking every layer."""
    import json

    spec = tmp_path / "kiln.yaml"
    shutil.copytree(QUICKSTART.parent, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "model" / "config.json").read_text(encoding="utf-8"))
    config[key] = value
    (tmp_path / "model" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    code, out, err = _run(capsys, "plan", str(spec), "--store", str(tmp_path / "store"))
    assert code == 1 and "Traceback" not in err and "internal error" not in err, out + err
    assert says in out and "K903" in out, out


def test_a_missing_file_with_a_near_name_beside_it_gets_a_did_you_mean(tmp_path: Path, capsys) -> None:
    """Issue 36: K905 named the missing file and nothing else."""
    shutil.copytree(QUICKSTART.parent, tmp_path, dirs_exist_ok=True)
    (tmp_path / "data" / "calib-prose.jsonl").rename(tmp_path / "data" / "calib_prose.jsonl")
    code, out, err = _run(capsys, "validate", str(tmp_path / "kiln.yaml"))
    assert code == 1 and "[K905]" in out and "help: did you mean 'data/calib_prose.jsonl'?" in out, out


def test_a_spec_written_after_gpu_profiles_gets_a_usage_error_that_says_why(tmp_path: Path, capsys) -> None:
    """argparse's `nargs="+"` takes the spec as a second capture file; the error says so and the
    two forms that work do work."""
    capture = tmp_path / "h100.lgip.txt"
    capture.write_text((Path(__file__).parent / "data" / "lgip" / "h100-sxm5-80gb.lgip.txt").read_text())
    code, _, err = _run(capsys, "validate", "--gpu-profiles", str(capture), str(QUICKSTART))
    assert code == 2
    assert "required: SPEC" in err and "give SPEC before it" in err and "end its files with --" in err
    for argv in (["validate", str(QUICKSTART), "--gpu-profiles", str(capture)],
                 ["validate", "--gpu-profiles", str(capture), "--", str(QUICKSTART)]):
        code, _, err = _run(capsys, *argv)
        assert code != 2, err
    code, _, err = _run(capsys, "validate")  # no --gpu-profiles: argparse's own words only
    assert code == 2 and "give SPEC before it" not in err
