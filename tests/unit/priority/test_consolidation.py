"""Consolidation: energy policies keep nodes empty or powered down for Slurm's power saving where the EDP
cost is small, and never wake a node that powered down less than `min_off_s` ago unless a job would
otherwise wait longer than `max_wake_wait_s` (docs/power-saving.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from easlurm.errors import ConfigError
from easlurm.model import Oracle
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob

ENERGY_POLICIES = ("zeus", "hades", "charon")
NOW = 10_000.0


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def node(name: str, free: int, power: str = "on", **kw: Any) -> NodeState:
    return NodeState(
        name, "a100-40gb", 8, free, 55.0, 400.0, 100.0, power_state=power, suspend_time_s=600.0, **kw
    )


def job(submit_s: float = NOW - 10.0, gpus: tuple[int, ...] = (4,), **kw: Any) -> PendingJob:
    return PendingJob("j", "u0", submit_s, "bert-large", 2000, (64,), gpus, malleable=False, **kw)


def decide(
    policy: str, nodes: tuple[NodeState, ...], pending: PendingJob, oracle: Oracle, **p: Any
) -> Decision:
    return get_policy(policy, **p).decide(ClusterSnapshot(NOW, nodes, pending=(pending,)), oracle)


@pytest.mark.parametrize("policy", ENERGY_POLICIES)
def test_a_busy_node_is_preferred_to_an_empty_one(policy: str, oracle: Oracle) -> None:
    """An empty node listed first and a busy one with 4 free: the 4-GPU job goes on the busy node, so that
    the empty one can be powered down."""
    nodes = (node("a0", 8, idle_since_s=NOW - 500), node("a1", 4))
    (start,) = decide(policy, nodes, job(), oracle).starts
    assert start.node == "a1"


@pytest.mark.parametrize("policy", ENERGY_POLICIES)
def test_a_powered_on_node_is_preferred_to_waking_one(policy: str, oracle: Oracle) -> None:
    """Two empty nodes, the first powered down: the job goes on the powered-on one."""
    nodes = (node("a0", 8, "off", powered_down_s=NOW - 5000), node("a1", 8, idle_since_s=NOW - 10))
    (start,) = decide(policy, nodes, job(), oracle).starts
    assert start.node == "a1"


def test_among_empty_nodes_the_one_idle_the_shortest_is_taken(oracle: Oracle) -> None:
    """The node idle longest is left to reach SuspendTime."""
    nodes = (node("a0", 8, idle_since_s=NOW - 500), node("a1", 8, idle_since_s=NOW - 20))
    (start,) = decide("zeus", nodes, job(), oracle).starts
    assert start.node == "a1"


def test_a_powered_down_node_is_woken_when_nothing_else_holds_the_job(oracle: Oracle) -> None:
    nodes = (node("a0", 2), node("a1", 8, "off", powered_down_s=NOW - 5000))
    (start,) = decide("zeus", nodes, job(), oracle).starts
    assert start.node == "a1"


def test_a_recently_powered_down_node_is_not_woken_within_min_off_s(oracle: Oracle) -> None:
    """Powered down 100 s ago, min_off_s 600: a job submitted 10 s ago waits (its wait until the rest ends,
    500 s, is within max_wake_wait_s), and the policy asks to be called when the rest ends."""
    nodes = (node("a0", 2), node("a1", 8, "off", powered_down_s=NOW - 100))
    policy = get_policy("zeus", min_off_s=600, max_wake_wait_s=1800)
    snap = ClusterSnapshot(NOW, nodes, pending=(job(),))
    assert policy.decide(snap, oracle).starts == ()
    assert policy.time_sensitive and policy.wake_at_s(snap, oracle) == NOW - 100 + 600
    later = replace(snap, time_s=NOW + 500.0)
    (start,) = policy.decide(later, oracle).starts
    assert start.node == "a1"


@pytest.mark.parametrize("power", ["off", "powering_down"])
def test_the_wait_bound_lets_a_job_wake_a_resting_node(power: str, oracle: Oracle) -> None:
    """The same node, but the job was submitted 1500 s ago: waiting for the rest to end would make it wait
    1500 + 500 s > max_wake_wait_s 1800 s, so it wakes the node now."""
    nodes = (node("a0", 2), node("a1", 8, power, powered_down_s=NOW - 100))
    (start,) = decide(
        "zeus", nodes, job(submit_s=NOW - 1500), oracle, min_off_s=600, max_wake_wait_s=1800
    ).starts
    assert start.node == "a1"


def test_time_policies_and_baselines_do_not_consolidate(oracle: Oracle) -> None:
    """Best fit only: pollux and slurm put the job on the first node with the fewest free GPUs."""
    nodes = (node("a0", 8, "off", powered_down_s=NOW - 5000), node("a1", 8, idle_since_s=NOW - 10))
    for name in ("pollux", "slurm"):
        (start,) = decide(name, nodes, job(), oracle).starts
        assert start.node == "a0", name
        assert not get_policy(name).consolidate


@pytest.mark.parametrize("policy", ENERGY_POLICIES)
def test_without_power_saving_placements_are_unchanged(policy: str, oracle: Oracle) -> None:
    """No node is ever powered down (no SuspendTime, all on): consolidation changes no decision."""
    pend = tuple(
        PendingJob(f"j{i}", "u0", NOW - 100 * i, m, 2000, (64,), (1, 2, 4, 8))
        for i, m in enumerate(("bert-large", "gpt2-medium", "bert-large", "gpt2-medium"))
    )
    nodes = tuple(
        NodeState(
            f"a{i}", "a100-40gb", 8, f, 55.0, 400.0, 100.0, idle_since_s=NOW - 50 * i if f == 8 else None
        )
        for i, f in enumerate((8, 3, 8, 5))
    )
    snap = ClusterSnapshot(NOW, nodes, pending=pend)
    on = get_policy(policy).decide(snap, oracle)
    off = get_policy(policy, consolidate=False).decide(snap, oracle)
    assert on == off


@pytest.mark.parametrize(
    "params",
    [
        {"consolidation_slack": -0.1},
        {"consolidation_slack": 11},
        {"min_off_s": -1},
        {"max_wake_wait_s": -5},
        {"consolidate": "yes"},
    ],
)
def test_bad_settings_are_refused(params: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(params))):
        get_policy("zeus", **params)


def test_an_unknown_power_state_is_refused() -> None:
    with pytest.raises(ConfigError, match="power_state"):
        node("a0", 8, "sleeping")
