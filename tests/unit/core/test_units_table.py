"""Quantity parsing at the edges and sacct-style table rendering."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from easlurm.errors import ConfigError
from easlurm.table import render_table, select_columns
from easlurm.units import format_energy, parse_duration_s, parse_power_w


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("200ms", 0.2),
        ("10s", 10.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1.5", 1.5),
        ("1-02:03:04", 93784.0),
        ("02:03:04", 7384.0),
        ("03:04", 184.0),
        (7, 7.0),
    ],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "10 parsecs", "-5s", "1:2:3:4", "x-01:00:00"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="interval"):
        parse_duration_s(text, field="interval")


@given(st.integers(0, 99), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_clock_form_roundtrip(d: int, h: int, m: int, s: int) -> None:
    assert parse_duration_s(f"{d}-{h:02d}:{m:02d}:{s:02d}") == d * 86400 + h * 3600 + m * 60 + s


def test_parse_power() -> None:
    assert parse_power_w("4500W") == 4500.0
    assert parse_power_w("4.5kW") == 4500.0
    assert parse_power_w(300) == 300.0
    with pytest.raises(ConfigError, match="budget"):
        parse_power_w("0W", field="budget")


def test_format_energy_blank_for_missing() -> None:
    assert format_energy(None) == ""
    assert format_energy(1500.0) == "1.50kJ"


def test_select_columns_case_insensitive_and_validated() -> None:
    cols = select_columns("jobid,GPUENERGY", ["JobID", "GPUEnergy", "State"], ["JobID"])
    assert cols == ["JobID", "GPUEnergy"]
    with pytest.raises(ConfigError, match="unknown column 'Bogus'"):
        select_columns("JobID,Bogus", ["JobID"], ["JobID"])


def test_render_parsable_and_aligned() -> None:
    rows = [{"JobID": "1", "State": "COMPLETED"}, {"JobID": "22", "State": None}]
    assert render_table(["JobID", "State"], rows, parsable=True) == "JobID|State\n1|COMPLETED\n22|"
    assert render_table(["JobID"], rows, parsable=True, header=False) == "1\n22"
    table = render_table(["JobID", "State"], rows).splitlines()
    assert len({len(line) for line in table[:3]}) == 1  # header, rule and first row align
