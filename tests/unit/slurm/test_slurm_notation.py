"""Slurm's notations in every version: JSON values, GRES/TRES, hostlists. One parser per notation,
used by the daemon, the agent and the trace readers alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from easlurm.slurm.gres import gpu_indices, gpus_of_gres, gpus_of_tres, parse_idx, shards_of_gres
from easlurm.slurm.hostlist import expand_hostlist, first_node
from easlurm.slurm.json_values import (
    NODE_BASE_STATES,
    epoch,
    integer,
    job_state,
    num,
    split_state,
    text,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5.0),
        ({"set": True, "infinite": False, "number": 5}, 5.0),  # 24.11+
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": True, "infinite": True, "number": 0}, None),
        (4294967294, None),  # NO_VAL: a never-started job's start
        ("12", 12.0),
        (True, None),
        (None, None),
        ("x", None),
    ],
)
def test_numbers_of_every_schema(value: object, expected: float | None) -> None:
    assert num(value) == expected


def test_epochs_and_integers() -> None:
    assert epoch(0) is None and epoch({"set": True, "number": 1700000000}) == 1700000000.0
    assert integer({"set": True, "infinite": False, "number": 2}) == 2 and integer(None, 1) == 1


@pytest.mark.parametrize(
    ("value", "base", "flags"),
    [
        ("RUNNING", "RUNNING", ()),
        (["RUNNING"], "RUNNING", ()),
        (["PENDING", "REQUEUED"], "PENDING", ("REQUEUED",)),
        (["REQUEUED", "PENDING"], "PENDING", ("REQUEUED",)),  # the base is found wherever it is
        ([], "", ()),
    ],
)
def test_job_states_as_base_and_flags(value: object, base: str, flags: tuple[str, ...]) -> None:
    assert job_state(value) == (base, flags)


def test_node_state_22_05_string_and_flags_and_later_list() -> None:
    assert split_state("idle", NODE_BASE_STATES, ["DRAIN"]) == ("IDLE", ("DRAIN",))
    assert split_state(["MIXED", "DRAIN"], NODE_BASE_STATES) == ("MIXED", ("DRAIN",))
    assert split_state("mixed+drain", NODE_BASE_STATES) == ("MIXED", ("DRAIN",))


def test_text_takes_first_of_a_list() -> None:
    assert text(["CANCELLED"]) == "CANCELLED" and text("x") == "x" and text(None) is None


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:h100:2(IDX:0-1)", (2, "h100")),  # 22.05 allocation
        ("gres:gpu:2", (2, None)),  # 22.05 request
        ("gres/gpu:a100:2", (2, "a100")),  # 24.11+ request
        ("gres/gpu=4", (4, None)),
        ("gpu:a100:8(S:0-1),shard:a100:24(S:0-1)", (8, "a100")),
        ("shard:2(2/3,0/3)", (0, None)),
        ("gpu", (1, None)),
        ("gpu:a100:2,gpu:h100:4", (6, "h100")),
        ("(null)", (0, None)),
        ("", (0, None)),
    ],
)
def test_gpu_counts_of_every_gres_form(gres: str, expected: tuple[int, str | None]) -> None:
    assert gpus_of_gres(gres) == expected


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("shard:2(IDX:0)", (2, (0,))),  # 22.05
        ("gres/shard:2", (2, ())),  # 24.11+ request
        ("shard:2(0/3,2/3,0/3)", (2, (1,))),  # 24.11+ allocation: used/total per GPU, no IDX
        ("shard:a100:3(3/3,0/3,-/3)", (3, (0,))),  # 26.05: "-" is a GPU held whole
        ("gpu:h100:8", (0, ())),
    ],
)
def test_shards_with_and_without_idx(gres: str, expected: tuple[int, tuple[int, ...]]) -> None:
    assert shards_of_gres(gres) == expected


def test_gpu_indices_and_idx_forms() -> None:
    assert gpu_indices("gpu:h100:2(IDX:1-2),shard:1(IDX:0)") == (1, 2)
    assert parse_idx("IDX:0-1,4") == (0, 1, 4)
    assert parse_idx("IDX:N/A") == () and parse_idx("S:0-1") == ()


def test_tres_gpu_counts_are_tolerant_for_the_daemon() -> None:
    assert gpus_of_tres("cpu=2,mem=4G,node=1,billing=2,gres/gpu=2,gres/gpu:h100=2") == (2, "h100")
    assert gpus_of_tres("not tres") == (0, None)


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        ("a100-[1-2,5],cpu-1", ["a100-1", "a100-2", "a100-5", "cpu-1"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("h100-1", ["h100-1"]),
        ("", []),
    ],
)
def test_hostlists(hosts: str, expected: list[str]) -> None:
    assert expand_hostlist(hosts) == expected
    assert first_node(hosts) == (expected[0] if expected else "")


@pytest.mark.parametrize("bad", ["n[1-x]", "n[a]", "n[1-999999999]"])
def test_bad_or_huge_hostlists_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="hostlist"):
        expand_hostlist(bad)
    assert first_node(bad) == ""


@given(st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=20, unique=True))
def test_hostlist_of_any_index_set_expands_to_it(indices: list[int]) -> None:
    """Any set of node numbers written as one bracket group expands back to those names, in order."""
    hosts = "gpu-[" + ",".join(str(i) for i in indices) + "]"
    assert expand_hostlist(hosts) == [f"gpu-{i}" for i in indices]
