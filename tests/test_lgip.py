"""Parsing captured `nvidia-smi mig -lgip` / `-lgipp` text, identifying its GPU and building GPU specs from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.catalog import (
    CAPTURE_SOURCE_PREFIX,
    CaptureMismatchError,
    LgipParseError,
    LgipProfile,
    MigGeometry,
    capture_sources,
    gpu_from_lgip,
    gpu_with_capture,
    identify,
    load_gpu_catalog,
    parse_lgip,
    parse_lgipp,
    read_capture,
)
from compiler.catalog.lgip import parse_profile_name, profiles_from_lgip, render_lgip, render_lgipp

DATA = Path(__file__).parent / "data" / "lgip"
H100_LGIP = (DATA / "h100-sxm5-80gb.lgip.txt").read_text()
H100_LGIPP = (DATA / "h100-sxm5-80gb.lgipp.txt").read_text()
A100_79 = (DATA / "a100-sxm4-80gb-7g79gb.lgip.txt").read_text()
RTX = (DATA / "rtx-pro-6000-server.lgip.txt").read_text()
FIXTURES = [H100_LGIP, A100_79, RTX]


@pytest.fixture(scope="module")
def catalog():
    return load_gpu_catalog()


def test_h100_capture_values():
    rows = parse_lgip(H100_LGIP)
    assert [(r.name, r.id, r.sm, r.memory_gib, r.ce, r.total) for r in rows] == [
        ("1g.10gb", 19, 16, 9.75, 1, 7), ("1g.10gb+me", 20, 16, 9.75, 1, 1), ("1g.20gb", 15, 26, 19.62, 1, 4),
        ("2g.20gb", 14, 32, 19.62, 2, 3), ("3g.40gb", 9, 60, 39.5, 3, 2), ("4g.40gb", 5, 64, 39.5, 4, 1),
        ("7g.80gb", 0, 132, 79.25, 8, 1),
    ]
    assert all(r.gpu == 0 and not r.p2p and r.free == r.total for r in rows)
    assert (rows[-1].dec, rows[-1].jpeg, rows[-1].ofa) == (7, 7, 1)
    assert rows[0].line == 6 and rows[0].memory_mib == 9984


@pytest.mark.parametrize("text", FIXTURES, ids=["h100", "a100-79", "rtx"])
def test_lgip_round_trip(text):
    rows = parse_lgip(text)
    again = parse_lgip(render_lgip(rows))
    assert again == rows


def test_lgipp_round_trip():
    rows = parse_lgipp(H100_LGIPP)
    assert [(r.profile_id, r.placements, r.size) for r in rows] == [
        (19, (0, 1, 2, 3, 4, 5, 6), 1), (20, (0, 1, 2, 3, 4, 5, 6), 1), (15, (0, 2, 4, 6), 2),
        (14, (0, 2, 4), 2), (9, (0, 4), 4), (5, (0,), 4), (0, (0,), 8)]
    assert parse_lgipp(render_lgipp(rows)) == rows


def test_gpu_from_lgip_matches_catalog(catalog):
    base = catalog["H100-SXM5-80GB"]
    spec = gpu_from_lgip(H100_LGIP, base)
    assert spec.name == base.name and spec.mig.max_instances == 7
    for got, want in zip(spec.mig.profiles, base.mig.profiles, strict=True):
        assert (got.name, got.id, got.compute_slices, got.memory_slices, got.memory_gb, got.max_count,
                got.placements, got.placement_size, got.attributes, got.sm) == \
               (want.name, want.id, want.compute_slices, want.memory_slices, want.memory_gb, want.max_count,
                want.placements, want.placement_size, want.attributes, want.sm)
        assert got.placement_status == want.placement_status == "inferred"
        assert got.sm_status == "verified"
    measured = gpu_from_lgip(H100_LGIP, base, lgipp=H100_LGIPP)
    assert all(p.placement_status == "verified" for p in measured.mig.profiles)
    assert base.mig.profiles[0].memory_mib == 9984  # the catalog itself is untouched


def test_driver_variant_name_7g79gb(catalog):
    base = catalog["A100-80GB"]
    spec = gpu_from_lgip(A100_79, base)
    assert len(spec.mig.profiles) == 7  # GPU 0 only
    full = spec.mig.profile("7g.79gb")
    assert full is not None and full.memory_gb == 79 and full.placements == (0,) and full.placement_size == 8
    assert spec.mig.profile("7g.80gb") is None
    assert base.mig.profile("7g.80gb") is not None


def test_four_slot_capture(catalog):
    spec = gpu_from_lgip(RTX, catalog["RTX-PRO-6000"])
    assert spec.mig.memory_slices == 4
    me_all = spec.mig.profile("1g.24gb+me.all")
    assert me_all.attributes == ("me.all",) and me_all.has_media_extensions and me_all.max_count == 1
    assert spec.mig.profile("2g.48gb-me").attributes == ("-me",)
    assert spec.mig.profile("4g.96gb").placements == (0,)


def test_pattern_fallback_without_catalog_profiles(catalog):
    bare = dataclasses.replace(catalog["H100"], mig=MigGeometry(supported=False))
    spec = gpu_from_lgip(H100_LGIP, bare)
    assert spec.mig.supported and spec.mig.memory_slices == 8 and spec.mig.compute_slices == 7
    p = spec.mig.profile("3g.40gb")
    assert p.placements == (0, 4) and p.placement_status == "inferred"


def test_unknown_id_needs_lgipp(catalog):
    text = H100_LGIP.replace("MIG 1g.10gb       19", "MIG 1g.10gb       77")
    with pytest.raises(LgipParseError) as err:
        profiles_from_lgip(text, catalog["H100"])
    assert err.value.line == 6
    lgipp = H100_LGIPP + "GPU  0 Profile ID 77 Placements: {0,1,2,3,4,5,6}:1\n"
    assert profiles_from_lgip(text, catalog["H100"], lgipp)[0].id == 77


def _err(text: str) -> LgipParseError:
    with pytest.raises(LgipParseError) as err:
        parse_lgip(text)
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith(f"line {err.value.line}:")
    return err.value


def test_garbage_is_rejected():
    assert _err("this is not nvidia-smi output\n").line == 1
    assert _err("").line == 1
    assert _err("No MIG-enabled devices found.\n").line == 1
    assert _err("\n\n   \nhello\n").line == 4


def test_truncated_tables_are_rejected():
    lines = H100_LGIP.splitlines()
    assert _err("\n".join(lines[:9])).line == 9  # ends after a first row
    assert _err("\n".join(lines[:10])).line == 10  # ends after the CE row, no border
    assert _err("\n".join(lines[:4])).line == 4  # header only
    assert _err("\n".join(lines[:5])).message == "table lists no GPU instance profiles"


def test_bad_cells_are_rejected():
    assert _err(H100_LGIP.replace(" 19     7/7", " 1x     7/7")).line == 6  # non-integer ID
    assert "profile ID" in _err(H100_LGIP.replace(" 15     4/4", " -5     4/4")).message
    assert _err(H100_LGIP.replace("7/7", "7-7")).line == 6
    assert _err(H100_LGIP.replace("79.25", "79,25")).line == 24
    assert _err(H100_LGIP.replace("No     26", "Maybe  26")).line == 12
    assert _err(H100_LGIP.replace("MIG 2g.20gb ", "MIG 2g20gb  ")).line == 15
    assert _err(H100_LGIP.replace("|   0  MIG 3g.40gb", "|   0  MIG 3g.40gb extra")).line == 18
    lines = H100_LGIP.splitlines()
    lines[6] = lines[6].replace("1     1     0", "1     x     0")
    assert _err("\n".join(lines)).line == 7
    lines = H100_LGIP.splitlines()
    lines[7] = "| something else |"
    assert _err("\n".join(lines)).line == 8


def test_prompt_and_comments_are_allowed():
    rows = parse_lgip("# captured on node a\n$ nvidia-smi mig -lgip\n" + H100_LGIP)
    assert rows == parse_lgip(H100_LGIP) and rows[0].line == 8


def test_lgipp_errors():
    for bad, line in [("garbage", 1), ("GPU  0 Profile ID x9 Placements: {0}:1", 1),
                      ("GPU  0 Profile ID 9 Placements: {}:4", 1), ("GPU  0 Profile ID 9 Placements: {0,a}:4", 1),
                      ("GPU  0 Profile ID 9 Placements: {0,4}:4\nGPU 0 Profile ID 5", 2), ("", 1)]:
        with pytest.raises(LgipParseError) as err:
            parse_lgipp(bad)
        assert err.value.line == line, bad


def test_profile_name_grammar():
    assert parse_profile_name("1g.24gb+me.all") == (1, 24, ("me.all",))
    assert parse_profile_name("1c.3g.40gb") == (3, 40, ())
    assert parse_profile_name("2g.48gb-me") == (2, 48, ("-me",))
    for bad in ("1g.24gb+me-me", "g.24gb", "1g.24", "1g.24gb+foo", "1g.24gb\n"):
        with pytest.raises(ValueError):
            parse_profile_name(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_only_raises_lgip_errors(text):
    for parse in (parse_lgip, parse_lgipp):
        try:
            parse(text)
        except LgipParseError as exc:
            assert exc.line >= 1


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(H100_LGIP) - 1), st.text(min_size=1, max_size=8))
def test_mutated_capture_parses_or_raises_lgip_error(pos, junk):
    text = H100_LGIP[:pos] + junk + H100_LGIP[pos + 1:]
    try:
        rows = parse_lgip(text)
    except LgipParseError as exc:
        assert 1 <= exc.line <= len(text.splitlines()) + 1
    else:
        assert all(isinstance(r, LgipProfile) for r in rows)


# ------------------------------------------------------------------------------------------------ captures

A30_BOTH = (DATA / "a30-24gb.lgipp-and-lgip.txt").read_text()


def _cap(*files: tuple[str, str]):
    return read_capture(list(files))


def test_capture_identifies_its_gpu(catalog):
    assert identify(_cap(("h100.txt", H100_LGIP)), catalog) == ["H100-SXM5-80GB"]
    assert identify(_cap(("rtx.txt", RTX)), catalog) == ["RTX-PRO-6000-Blackwell-Server-96GB"]
    assert identify(_cap(("a30.txt", A30_BOTH)), catalog) == ["A30-24GB"]
    # 7g.79gb (older driver) is still the A100 80GB's full-GPU profile; SXM4 and PCIe share die and MIG geometry
    a100 = _cap(("a100.txt", A100_79))
    assert identify(a100, catalog) == ["A100-SXM4-80GB", "A100-PCIe-80GB"]
    assert a100.full_profile.name == "7g.79gb" and a100.full_profile.sm == 98 and a100.gpu_indexes == (0, 1)
    rtx = _cap(("rtx.txt", RTX))
    assert rtx.full_profile.name == "4g.96gb"  # not its +gfx twin


def test_capture_refuses_other_gpus(catalog):
    h100 = _cap(("node-a/h100.txt", H100_LGIP))
    for other in ("A100-80GB", "A100-PCIe", "H100-PCIe", "H100-NVL", "H200", "GH200-96GB", "A30", "RTX-PRO-6000"):
        assert not h100.matches(catalog[other]), other
        with pytest.raises(CaptureMismatchError) as err:
            gpu_with_capture(catalog[other], h100)
        assert err.value.source == "node-a/h100.txt" and str(err.value).startswith("node-a/h100.txt: ")
        assert "7g.80gb with 132 SMs" in err.value.message
    assert "114 SMs" in h100.mismatch(catalog["H100-PCIe"])  # same 7g.80gb name, fewer SMs on the PCIe die
    assert "98 SMs" in h100.mismatch(catalog["A100-80GB"])
    for no_mig in ("L40S", "L4"):
        assert "no MIG" in h100.mismatch(catalog[no_mig])
    a100 = _cap(("a100.txt", A100_79))
    assert not a100.matches(catalog["H100"]) and not a100.matches(catalog["H100-PCIe"])  # 98 SMs < 90% of 114
    assert not a100.matches(catalog["A100-40GB"])
    a30 = _cap(("a30.txt", A30_BOTH))
    assert not a30.matches(catalog["RTX-PRO-6000"]) and "24 GB" in a30.mismatch(catalog["RTX-PRO-6000"])


def test_memory_names_tolerate_driver_rounding_only():
    from compiler.catalog.capture import _same_memory_name

    assert _same_memory_name(79, 80) and _same_memory_name(189, 186) and _same_memory_name(80, 80)
    assert not _same_memory_name(141, 144) and not _same_memory_name(94, 96) and not _same_memory_name(78, 80)


def test_lgipp_placements_replace_the_catalogs(catalog):
    base = catalog["H100"]
    assert all(p.placement_status == "inferred" for p in base.mig.profiles)
    for files in ([("h100.lgip", H100_LGIP), ("h100.lgipp", H100_LGIPP)],
                  [("h100.lgipp", H100_LGIPP), ("h100.lgip", H100_LGIP)]):
        cap = read_capture(files)
        spec = gpu_with_capture(base, cap)
        assert all(p.placement_status == "verified" for p in spec.mig.profiles)
        assert [(p.name, p.placements, p.placement_size) for p in spec.mig.profiles] == \
               [(p.name, p.placements, p.placement_size) for p in base.mig.profiles]
        assert cap.sources == ("h100.lgip", "h100.lgipp") and capture_sources(spec) == ("h100.lgip", "h100.lgipp")
        assert spec.sources[:2] == (CAPTURE_SOURCE_PREFIX + "h100.lgip", CAPTURE_SOURCE_PREFIX + "h100.lgipp")
        assert set(base.sources) <= set(spec.sources)
    assert capture_sources(base) == ()  # the catalog itself is untouched
    # without -lgipp the catalog's placements (and their weaker status) stay
    only = gpu_with_capture(base, _cap(("h100.lgip", H100_LGIP)))
    assert all(p.placement_status == "inferred" and p.sm_status == "verified" for p in only.mig.profiles)
    assert capture_sources(only) == ("h100.lgip",)


def test_one_file_with_both_outputs(catalog):
    both = "$ nvidia-smi mig -lgip\n" + H100_LGIP + "\n$ nvidia-smi mig -lgipp\n" + H100_LGIPP
    a = read_capture([("both.txt", both)])
    b = read_capture([("x.lgip", H100_LGIP), ("y.lgipp", H100_LGIPP)])
    assert a.profiles == b.profiles and a.placements == b.placements
    assert a.sources == ("both.txt",) and a.lgipp_source == "both.txt"
    assert a.profiles[0].line == 7  # line numbers stay those of the file
    a30 = read_capture([("a30.txt", A30_BOTH)])
    spec = gpu_with_capture(catalog["A30"], a30)
    assert [(p.name, p.id, p.placements, p.placement_status) for p in spec.mig.profiles] == \
           [(p.name, p.id, p.placements, "verified") for p in catalog["A30"].mig.profiles]
    assert (spec.mig.compute_slices, spec.mig.memory_slices, spec.mig.max_instances) == (4, 4, 4)
    assert a30.full_placement_size == 4 and a30.placements[0].line == 2


def test_a30_without_lgipp_uses_the_catalog_placements(catalog):
    lgip_only = A30_BOTH[A30_BOTH.index("$ nvidia-smi mig -lgip\n"):]
    spec = gpu_with_capture(catalog["A30"], read_capture([("a30.lgip", lgip_only)]))
    assert spec.mig.profile("2g.12gb+me").placements == (0, 2)
    assert spec.mig.profile("2g.12gb+me").placement_status == "partially-verified"  # the catalog's
    bare = dataclasses.replace(catalog["A30"], mig=dataclasses.replace(catalog["A30"].mig, profiles=(
        *catalog["A30"].mig.profiles[:3], catalog["A30"].mig.profiles[4])))
    assert gpu_with_capture(bare, read_capture([("a30.lgip", lgip_only)])).mig.profile(
        "2g.12gb+me").placement_status == "inferred"  # the 4-slot ID pattern


def _capture_err(*files: tuple[str, str]) -> LgipParseError:
    with pytest.raises(LgipParseError) as err:
        read_capture(list(files))
    assert str(err.value).startswith(f"{err.value.source}: line {err.value.line}: ")
    return err.value


def test_capture_garbage_names_file_and_line():
    e = _capture_err(("a.txt", H100_LGIP), ("b.txt", H100_LGIPP + "hello world\n"))
    assert (e.source, e.line) == ("b.txt", 8)
    e = _capture_err(("a.txt", "No MIG-enabled devices found.\n"))
    assert (e.source, e.line) == ("a.txt", 1)
    e = _capture_err(("a.txt", "\n\n"))
    assert e.source == "a.txt" and "no `nvidia-smi mig -lgip` table" in e.message
    e = _capture_err(("a.txt", H100_LGIPP))
    assert "no `nvidia-smi mig -lgip` table" in e.message
    lines = H100_LGIP.splitlines()
    e = _capture_err(("a.txt", "\n".join(lines[:9])))
    assert (e.source, e.line) == ("a.txt", 9) and "truncated" in e.message
    e = _capture_err(("a.txt", H100_LGIP.replace("79.25", "79,25")))
    assert (e.source, e.line) == ("a.txt", 24)
    e = _capture_err(("x.txt", H100_LGIP), ("y.txt", H100_LGIPP.replace("{0,4}:4", "{0,a}:4")))
    assert (e.source, e.line) == ("y.txt", 5)
    with pytest.raises(LgipParseError):
        read_capture([])


def test_capture_structure_errors():
    e = _capture_err(("a.txt", H100_LGIP), ("b.txt", RTX))
    assert (e.source, e.line) == ("b.txt", 1) and "second -lgip table" in e.message and "a.txt line 1" in e.message
    e = _capture_err(("a.txt", H100_LGIP + H100_LGIPP + H100_LGIPP.replace("GPU  0", "GPU  1")))
    assert "second" not in e.message and "GPU 1" in e.message  # one -lgipp listing, but for a GPU -lgip lacks
    e = _capture_err(("a.txt", H100_LGIPP + "\n# now -lgip\n" + H100_LGIP + "\n" + H100_LGIPP))
    assert "second -lgipp listing" in e.message and e.line == 7 + 2 + len(H100_LGIP.splitlines()) + 2
    missing = "\n".join(ln for ln in H100_LGIPP.splitlines() if "ID 15 " not in ln)
    e = _capture_err(("a.lgip", H100_LGIP), ("a.lgipp", missing))
    assert (e.source, e.line) == ("a.lgip", 12) and "ID 15" in e.message  # the -lgip row that lacks a line
    extra = H100_LGIPP + "GPU  0 Profile ID 77 Placements: {0}:1\n"
    e = _capture_err(("a.lgip", H100_LGIP), ("a.lgipp", extra))
    assert (e.source, e.line) == ("a.lgipp", 8) and "77" in e.message
    e = _capture_err(("a.lgip", H100_LGIP), ("a.lgipp", H100_LGIPP + H100_LGIPP.splitlines()[0] + "\n"))
    assert e.line == 8 and "second -lgipp line" in e.message
    e = _capture_err(("a.lgip", H100_LGIP), ("a.lgipp", H100_LGIPP.replace("{0,4}:4", "{0,6}:4")))
    assert e.line == 5 and "do not fit 8 memory slots" in e.message
    # two GPUs must be one model: GPU 1 of the A100 capture renamed to another profile set
    mixed = A100_79.replace("|   1  MIG 7g.79gb        0", "|   1  MIG 7g.80gb        0")
    e = _capture_err(("node.txt", mixed))
    assert e.source == "node.txt" and "GPU 1 lists other MIG profiles than GPU 0" in e.message
    assert e.line == parse_lgip(mixed)[7].line


def test_gpu_from_lgip_still_works(catalog):
    # the old single-text entry point stays for callers that pass one -lgip text
    old = gpu_from_lgip(H100_LGIP, catalog["H100"], lgipp=H100_LGIPP)
    new = gpu_with_capture(catalog["H100"], read_capture([("c", H100_LGIP), ("d", H100_LGIPP)]))
    assert old.mig.profiles == new.mig.profiles and old.sources == catalog["H100"].sources


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.booleans())
def test_arbitrary_capture_text_only_raises_lgip_errors(text, prepend):
    files = [("f.txt", (H100_LGIP if prepend else "") + text)]
    try:
        cap = read_capture(files)
    except LgipParseError as exc:
        assert exc.line >= 1 and exc.source == "f.txt"
    else:
        assert cap.profiles
