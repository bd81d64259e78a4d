"""Arch presets and YAML validation: derived sizes and one-line errors naming file, field, value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run

from wsealloc.arch import PRESETS, load_arch, parse_set_option
from wsealloc.arch.loader import arch_to_dict
from wsealloc.errors import ArchError, UsageError


def test_wse2_matches_notebook_numbers() -> None:
    a = load_arch("wse2")
    assert (a.rows, a.cols) == (12 * 66, 8 * 154)
    assert a.total_cores == 66 * 154 * 12 * 8 == 975_744
    assert a.core.sram_bytes == 48 * 1024
    assert a.core.macs_per_cycle == 4
    assert a.noc.link_bytes_per_cycle == 4
    assert a.dtype.bytes == 2
    assert a.usable_sram_bytes == 48 * 1024 - 4 * 1024


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_and_cite_sources(name: str) -> None:
    a = load_arch(name)
    assert a.total_cores > 0 and a.sources


def test_tiny_is_a_few_hundred_cores() -> None:
    assert 100 <= load_arch("tiny").total_cores <= 1000


def test_wse3_core_count_near_published() -> None:
    assert abs(load_arch("wse3").total_cores - 900_000) / 900_000 < 0.01


def test_set_overrides_with_units() -> None:
    a = load_arch("wse2", ["core.sram_bytes=96KiB", "noc.link_bytes_per_cycle=8"])
    assert a.core.sram_bytes == 96 * 1024 and a.noc.link_bytes_per_cycle == 8


def test_arch_is_frozen() -> None:
    a = load_arch("tiny")
    with pytest.raises(ValueError):
        a.core.macs_per_cycle = 8  # type: ignore[misc]


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["core.sram_bytes=-4"], "core.sram_bytes"),
        (["core.sram_byts=4"], "did you mean 'sram_bytes'"),
        (["core.macs_per_cycle=abc"], "core.macs_per_cycle: 'abc'"),
        (["core.sram_reserve_bytes=64KiB"], "sram_reserve_bytes (65536) must be smaller"),
        (["noc.link_bytes_per_cycle=0"], "noc.link_bytes_per_cycle"),
        # out-of-range values fail here, naming the field, not later as overflow or out of memory
        (["noc.link_bytes_per_cycle=1e-300"], "greater than or equal to 0.015625"),
        (["noc.link_bytes_per_cycle=.inf"], "finite number"),
        (["clock_hz=.inf"], "clock_hz"),
        (["core.macs_per_cycle=true"], "core.macs_per_cycle: True"),
        (["wafer.dies.rows=100000"], "wsealloc plans wafers of at most"),
        (["wafer.defects.cores=[[10000, 0]]"], "defects.cores [10000, 0] is outside"),
        (["wafer.die_crossing_penalty_cycles=99999999999999999999"], "less than or equal to 1000000000"),
        (["cluster.wafers=many"], "cluster.wafers: 'many': expected a number of wafers (1 to 1024) or 'auto'"),
    ],
)
def test_bad_fields_name_field_and_value(sets: list[str], needle: str) -> None:
    with pytest.raises(ArchError) as exc:
        load_arch("wse2", sets)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_yaml_file_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ArchError, match="empty"):
        load_arch(str(empty))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncore: [unclosed\n")
    with pytest.raises(ArchError, match="not valid YAML"):
        load_arch(str(bad))
    missing = tmp_path / "m.yaml"
    missing.write_text("name: m\nclock_hz: 1GHz\n")
    with pytest.raises(ArchError, match="missing required field"):
        load_arch(str(missing))
    with pytest.raises(ArchError, match="not found"):
        load_arch(str(tmp_path / "nope.yaml"))
    with pytest.raises(ArchError, match="did you mean 'wse2'"):
        load_arch("wse22")


def test_set_syntax_errors() -> None:
    for bad in ("core.sram_bytes", "=4", "a..b=1", "x="):
        with pytest.raises(UsageError):
            parse_set_option(bad)


def test_arch_show_output_loads_back(tmp_path: Path) -> None:
    # `wsealloc arch show wse2 > my.yaml` is how the docs say to start a new arch: it must load
    saved = tmp_path / "my.yaml"
    saved.write_text(json.dumps(arch_to_dict(load_arch("wse2"))))
    assert load_arch(str(saved)).total_cores == load_arch("wse2").total_cores


def test_duplicate_keys_refused_anywhere(tmp_path: Path) -> None:
    # a second `sram_bytes:` or `noc:` used to win silently; now it names the key, its line and the file
    base = (Path(__file__).resolve().parents[1] / "wsealloc" / "arch" / "presets" / "wse2.yaml").read_text()
    twice = tmp_path / "twice.yaml"
    twice.write_text(base + "core:\n  sram_bytes: 96KiB\n")
    with pytest.raises(ArchError, match=r"twice.yaml: line \d+: key 'core' is given twice \(first on line \d+\)"):
        load_arch(str(twice))
    nested = tmp_path / "nested.yaml"
    nested.write_text(base.replace("  sram_bytes: 48KiB\n", "  sram_bytes: 48KiB\n  sram_bytes: 96KiB\n"))
    with pytest.raises(ArchError, match="key 'sram_bytes' is given twice"):
        load_arch(str(nested))
    with pytest.raises(UsageError, match="--set core: line 1: key 'a' is given twice"):
        parse_set_option("core={a: 1, a: 2}")
    # syntax errors keep their line and column
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncore: [unclosed\n")
    with pytest.raises(ArchError, match="not valid YAML at line 3, column 1"):
        load_arch(str(bad))


def test_strict_yaml_keeps_merge_keys() -> None:
    from wsealloc.yamlload import DuplicateKeyError, load_yaml

    # an explicit key overriding a merged one is YAML's documented idiom, not a duplicate
    assert load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n", "t")["d"] == {"x": 3, "y": 2}
    with pytest.raises(DuplicateKeyError, match="t: line 5: key 'x' is given twice"):
        load_yaml("base: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n  x: 3\n", "t")


def test_strict_yaml_bounds_nesting_and_aliases() -> None:
    from wsealloc.yamlload import MAX_ALIAS_VALUES, MAX_DEPTH, StrictYamlError, load_yaml, load_yaml_node

    # 64 levels read; the 65th is refused at its line, long before Python's recursion limit
    assert load_yaml("a:\n  " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1), "t") == {"a": _nest(MAX_DEPTH - 2)}
    with pytest.raises(StrictYamlError, match="t: line 2: lists and mappings nested more than 64 levels deep"):
        load_yaml("a:\n  " + "[" * MAX_DEPTH + "]" * MAX_DEPTH, "t")
    # aliases share a section as before; what they add, expanded, is bounded (10 x 1,000 values fit, 11 do not)
    section = "s: &s [" + ", ".join(["1"] * (MAX_ALIAS_VALUES // 10 - 1)) + "]\n"
    assert len(load_yaml(section + "t: [" + ", ".join(["*s"] * 10) + "]\n", "t")["t"]) == 10
    with pytest.raises(StrictYamlError, match="t: line 2: alias \\*s stands for 1,000 values"):
        load_yaml(section + "t: [" + ", ".join(["*s"] * 11) + "]\n", "t")
    # aliases nesting the document too deep once expanded, and an alias inside its own value
    deep = "d: &d " + "[" * 40 + "]" * 40 + "\ne: [[[[[[[[[[[[[[[[[[[[[[[[[[[[*d]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n"
    with pytest.raises(StrictYamlError, match="line 2: alias \\*d nests lists and mappings more than 64 levels deep"):
        load_yaml(deep, "t")
    with pytest.raises(StrictYamlError, match="line 1: alias \\*r is inside the value it names"):
        load_yaml("r: &r {again: *r}\n", "t")
    # the composed node comes with the data (constraints report lines from it); an empty document is None
    data, node = load_yaml_node("- 1\n- 2\n", "t")
    assert data == [1, 2] and node is not None and node.value[1].start_mark.line == 1
    assert load_yaml_node("", "t") == (None, None)


def _nest(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


def test_wse2_measured_is_the_machine_waferllm_ran() -> None:
    """750 x 994 usable cores, 48 KiB, 1.1 GHz, fp16 with fp16 partial sums, the calibrated execution."""
    a = load_arch("wse2-measured")
    assert (a.rows, a.cols, a.total_cores) == (750, 994, 745_500)
    assert a.clock_hz == 1.1e9 and a.core.sram_bytes == 48 * 1024 and a.usable_sram_bytes == 44 * 1024
    assert (a.dtype.bytes, a.dtype.accum_bytes, a.core.macs_per_cycle, a.noc.link_bytes_per_cycle) == (2, 2, 4, 2)
    assert a.execution is not None and a.execution.issue_cycles > 0 and a.execution.step_cycles > 0
    tuned = load_arch("wse2-measured", ["execution.issue_cycles=10"])
    assert tuned.execution is not None and tuned.execution.issue_cycles == 10
    out = run("arch", "list")
    assert out.returncode == 0 and "wse2-measured" in out.stdout and "745,500" in out.stdout


def test_wse3_measured_carries_the_wse2_fit_onto_the_published_wse3() -> None:
    """The published WSE-3 figures (900k cores as 84 dies of 64 x 168, 48 KiB, 8-wide fp16 SIMD) with
    every execution cost of wse2-measured carried over, none fitted to a WSE-3 rate; each said so."""
    a, b, w3 = load_arch("wse3-measured"), load_arch("wse2-measured"), load_arch("wse3")
    assert (a.rows, a.cols, a.total_cores) == (w3.rows, w3.cols, 903_168)
    assert (a.core.sram_bytes, a.core.macs_per_cycle) == (48 * 1024, 8) == (w3.core.sram_bytes, w3.core.macs_per_cycle)
    assert a.execution == b.execution and a.clock_hz == b.clock_hz
    assert (a.dtype.bytes, a.dtype.accum_bytes, a.noc.link_bytes_per_cycle) == (
        b.dtype.bytes,
        b.dtype.accum_bytes,
        b.noc.link_bytes_per_cycle,
    )
    said = " ".join(a.sources)
    for carried in ("issue_cycles 6, step_cycles 180, collective_cycles 63", "Clock: not published", "link_bytes_per_cycle 2"):
        assert carried in said
