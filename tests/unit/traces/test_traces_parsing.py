"""Property and example tests for TRES strings and Slurm time notations."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from easlurm.slurm.gres import gpus_from_tres, gpus_of_gres, parse_tres
from easlurm.slurm.times import format_elapsed, parse_elapsed_s, parse_timelimit_s, parse_timestamp_s

_NAMES = st.sampled_from(
    ["cpu", "node", "billing", "energy", "gres/gpu", "gres/gpu:a100", "fs/disk", "license/x"]
)


@given(st.dictionaries(_NAMES, st.integers(min_value=0, max_value=10**9), min_size=1))
def test_tres_round_trip(items: dict[str, int]) -> None:
    """Any name=count list parses back to the same counts, in any order."""
    text = ",".join(f"{k}={v}" for k, v in items.items())
    assert parse_tres(text) == {k: float(v) for k, v in items.items()}


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["", "K", "M", "G", "T"]))
def test_tres_memory_suffixes_are_binary_and_default_to_mib(value: int, suffix: str) -> None:
    scale = {"": 1024**2, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[suffix]
    assert parse_tres(f"mem={value}{suffix}")["mem"] == value * scale


@given(st.integers(min_value=0, max_value=64), st.integers(min_value=0, max_value=64))
def test_gpus_from_typed_tres_take_the_largest_type(a100: int, h100: int) -> None:
    tres = {"gres/gpu": float(a100 + h100), "gres/gpu:a100": float(a100), "gres/gpu:h100": float(h100)}
    n, gpu_type = gpus_from_tres(tres)
    assert n == a100 + h100
    assert gpu_type == ("a100" if a100 >= h100 else "h100")


def test_tres_example_from_the_issue() -> None:
    tres = parse_tres("billing=12,cpu=12,mem=33600M,node=1,gres/gpu=4,gres/gpu:a100=4")
    assert tres["cpu"] == 12 and tres["mem"] == 33600 * 1024**2
    assert gpus_from_tres(tres) == (4, "a100")
    assert gpus_from_tres(parse_tres("cpu=2,gres/gpu:h100=2")) == (2, "h100")
    assert gpus_from_tres(parse_tres("")) == (0, None)


@pytest.mark.parametrize("bad", ["cpu", "cpu=", "gres/gpu=two", "=4", "mem=12Q"])
def test_malformed_tres_names_the_item(bad: str) -> None:
    with pytest.raises(ValueError, match="TRES item"):
        parse_tres(f"node=1,{bad}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("gpu:a100:4(IDX:0-3)", (4, "a100")), ("gres/gpu:2", (2, None)), ("gpu", (1, None)), ("", (0, None))],
)
def test_gres_columns(text: str, expected: tuple[int, str | None]) -> None:
    assert gpus_of_gres(text, strict=True) == expected


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_elapsed_round_trip(seconds: int) -> None:
    """Slurm's [D-]HH:MM:SS of any whole number of seconds parses back to it."""
    assert parse_elapsed_s(format_elapsed(seconds)) == seconds


@given(
    st.integers(min_value=0, max_value=365),
    st.integers(min_value=0, max_value=23),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
)
def test_every_slurm_time_limit_form(d: int, h: int, m: int, s: int) -> None:
    """The forms sbatch --time accepts: D-HH, D-HH:MM, D-HH:MM:SS, HH:MM:SS, MM:SS, and minutes."""
    assert parse_timelimit_s(f"{d}-{h}") == d * 86400 + h * 3600
    assert parse_timelimit_s(f"{d}-{h}:{m:02d}") == d * 86400 + h * 3600 + m * 60
    assert parse_timelimit_s(f"{d}-{h}:{m:02d}:{s:02d}") == d * 86400 + h * 3600 + m * 60 + s
    assert parse_timelimit_s(f"{h}:{m:02d}:{s:02d}") == h * 3600 + m * 60 + s
    assert parse_timelimit_s(f"{m}:{s:02d}") == m * 60 + s
    assert parse_timelimit_s(str(m), minutes=True) == m * 60


@given(
    st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)).map(
        lambda d: d.replace(microsecond=0)
    )
)
def test_timestamp_round_trip(dt: datetime) -> None:
    """A naive timestamp is read in the process's zone (easlurm.slurm.times); `tz` names another one."""
    assert parse_timestamp_s(dt.isoformat()) == dt.timestamp()
    assert parse_timestamp_s(dt.isoformat(), tz=UTC) == dt.replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize("text", ["Unknown", "None", "N/A", "", "(null)", "0"])
def test_unknown_times_are_none(text: str) -> None:
    assert parse_timestamp_s(text) is None
    assert parse_elapsed_s(text if text != "0" else "") is None


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "INVALID", ""])
def test_no_time_limit_is_none(text: str) -> None:
    assert parse_timelimit_s(text) is None


@pytest.mark.parametrize("bad", ["2024-13-45T10:00:00", "yesterday", "12:00"])
def test_bad_timestamps_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp_s(bad)


@pytest.mark.parametrize("bad", ["1:2:3:4", "x-01:00:00", "aa:bb", "-5:00"])
def test_bad_elapsed_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_elapsed_s(bad)
