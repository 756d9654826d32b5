"""Packed and spread candidates: policies score both with the oracle at their node counts."""

from __future__ import annotations

from typing import Any

import pytest

from easlurm.errors import ConfigError
from easlurm.model import Oracle
from easlurm.priority.policies import get_policy, policy_params
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob, StartJob

TIME_POLICIES = ("pollux", "themis", "chronos")
ENERGY_POLICIES = ("zeus", "hades", "charon")


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def node(name: str, free: int, total: int = 8) -> NodeState:
    return NodeState(name, "a100-40gb", total, free, 55.0, 400.0, 100.0)


def job(model: str = "bert-large", gpus: tuple[int, ...] = (4,), **kw: Any) -> PendingJob:
    batch = (256,) if model == "resnet50" else (64,)
    precision = "fp32-strict" if model == "resnet50" else "bf16"
    return PendingJob("j", "u0", 0.0, model, 2000, batch, gpus, precision=precision, **kw)


def decide(
    policy: str, free: tuple[int, ...], pending: PendingJob, oracle: Oracle, **params: Any
) -> Decision:
    nodes = tuple(node(f"a{i}", f) for i, f in enumerate(free))
    return get_policy(policy, **params).decide(ClusterSnapshot(100.0, nodes, pending=(pending,)), oracle)


@pytest.mark.parametrize("policy", TIME_POLICIES + ENERGY_POLICIES)
def test_packed_when_one_node_holds_the_job(policy: str, oracle: Oracle) -> None:
    """4 + 4 free: the 4 GPUs go on one node (spreading never makes a step faster or leaner)."""
    (start,) = decide(policy, (4, 4), job(), oracle).starts
    assert (start.n_gpus, start.n_nodes, start.nodes) == (4, 1, ())


@pytest.mark.parametrize("policy", ENERGY_POLICIES)
def test_an_energy_policy_takes_packed_gpus_over_a_costly_spread(policy: str, oracle: Oracle) -> None:
    """2 + 2 free, BERT-large may run on 4 or 2 GPUs: 4 spread over both nodes is free, but its all-reduce
    over the network costs; the energy policy starts 2 packed GPUs instead."""
    (start,) = decide(policy, (2, 2), job(gpus=(4, 2)), oracle).starts
    assert (start.n_gpus, start.n_nodes) == (2, 1)


@pytest.mark.parametrize("policy", TIME_POLICIES)
def test_a_time_policy_spreads_a_rigid_job_on_a_fragmented_cluster(policy: str, oracle: Oracle) -> None:
    """Only 2 + 2 free for a rigid 4-GPU job: the fastest placement now is spread, and it starts."""
    (start,) = decide(policy, (2, 2), job(malleable=False), oracle).starts
    assert (start.n_gpus, start.n_nodes, start.nodes, start.node_gpus) == (4, 2, ("a0", "a1"), (2, 2))


@pytest.mark.parametrize("policy", ENERGY_POLICIES)
def test_an_energy_policy_waits_when_spreading_costs_and_spreads_when_it_does_not(
    policy: str, oracle: Oracle
) -> None:
    """Only 2 + 2 free for a rigid 4-GPU job. BERT-large (1.3 GB of gradients) over the network costs
    far more than the slack: it waits. ResNet-50 (100 MB) hides its all-reduce under the backward: the
    spread is within the slack and it starts; with no slack at all it waits too."""
    assert not decide(policy, (2, 2), job(malleable=False), oracle).starts
    (start,) = decide(policy, (2, 2), job("resnet50", malleable=False), oracle).starts
    assert start.n_nodes == 2
    assert not decide(policy, (2, 2), job("resnet50", malleable=False), oracle, spread_slack=0.0).starts


def test_the_spread_costs_what_the_oracle_says(oracle: Oracle) -> None:
    """The candidates' times are the oracle's at their node counts: spread is slower, and the rule
    compares EDPs against the job's best packed one."""
    snap = ClusterSnapshot(100.0, (node("a0", 2), node("a1", 2)), pending=(job(malleable=False),))
    cyc = get_policy("zeus").cycle(snap, oracle)
    rows = {int(m): i for i, m in enumerate(cyc.n_nodes)}
    packed, spread = rows[1], rows[2]
    assert cyc.spread is not None and not cyc.spread[packed] and cyc.spread[spread]
    assert not cyc.feasible[packed] and cyc.feasible[spread]
    assert cyc.time_s[spread] > cyc.time_s[packed] * 1.05
    assert cyc.edp[spread] > cyc.edp[packed] * 1.05


@pytest.mark.parametrize("policy", ["pollux", "zeus"])
def test_a_job_larger_than_a_node_is_packed_on_the_fewest_nodes(policy: str, oracle: Oracle) -> None:
    """16 GPUs on nodes of 8: two full nodes is the packed placement, chosen over three or more."""
    (start,) = decide(policy, (8, 8, 8), job("resnet50", gpus=(16,)), oracle).starts
    assert (start.n_nodes, start.node_gpus) == (2, (8, 8))
    if policy == "pollux":  # 8 + 6 + 4 free: no two nodes hold it, three do
        (start,) = decide(policy, (8, 6, 4), job("resnet50", gpus=(16,)), oracle).starts
        assert (start.n_nodes, sum(start.node_gpus)) == (3, 16)


def test_an_uneven_spread_fills_the_fullest_node_then_fits_the_rest(oracle: Oracle) -> None:
    """3 GPUs on 2 + 1 + 2 free: two nodes, all of the fullest and the rest on the node it fits best."""
    (start,) = decide("pollux", (2, 1, 2), job(gpus=(3,)), oracle).starts
    assert start.allocation() == (("a0", 2), ("a1", 1))


def test_candidates_are_predicted_once_per_template(oracle: Oracle) -> None:
    """Every node count of every option in one oracle call, reused whatever the free GPUs."""
    calls: list[int] = []

    class Counting:
        catalogue = oracle.catalogue

        def predict(self, workload: Any, placements: Any) -> Any:
            calls.append(len(placements))
            return oracle.predict(workload, placements)

    counting = Counting()
    policy = get_policy("zeus", power_limits=False)  # one limit: rows are GPU counts x node counts
    for free in ((2, 2), (4, 4), (8, 1)):
        nodes = (node("a0", free[0]), node("a1", free[1]))
        policy.decide(ClusterSnapshot(100.0, nodes, pending=(job(gpus=(4, 2, 1)),)), counting)
    assert len(calls) == 1
    assert calls[0] == 2 + 2 + 1  # 4 and 2 GPUs on 1 or 2 nodes, 1 GPU on 1


def test_a_spread_start_round_trips_and_rejects_a_negative_slack() -> None:
    start = StartJob("j", "a0", 4, 64, "a100-40gb", nodes=("a0", "a1"), node_gpus=(2, 2))
    again = Decision.from_dict(Decision(starts=(start,)).to_dict()).starts[0]
    assert again == start and again.n_nodes == 2
    with pytest.raises(ConfigError, match="spread_slack"):
        get_policy("zeus", spread_slack=-0.1)


def test_a_noisy_oracle_errs_alike_at_every_node_count_of_a_placement() -> None:
    """The noise is the oracle's error on a workload and its GPUs: packed and spread rows of the same GPUs
    and batch share it (else an energy policy would spread jobs whose noise happens to look cheap), and
    the spread stays slower by the oracle's communication term alone."""
    import numpy as np

    from easlurm.model import NoisyOracle, Placements, get_workload

    pl = Placements.of(np.array([4, 4, 4, 2]), 64, "a100-40gb", n_nodes=np.array([0, 2, 4, 0]))
    wl = get_workload("bert-large")
    clean, noisy = Oracle().predict(wl, pl), NoisyOracle(sigma=0.1, seed=3).predict(wl, pl)
    ratio = noisy.step_time_s / clean.step_time_s
    assert np.allclose(ratio[:3], ratio[0]) and not np.isclose(ratio[3], ratio[0])
    assert noisy.step_time_s[0] < noisy.step_time_s[1] < noisy.step_time_s[2]


def test_the_site_sets_the_spread_slack_for_the_simulator_and_the_daemon(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`sched.spread_slack` (a file, the environment) reaches the policy `easlurm sim run` builds and the
    one the daemon builds; unset, each policy keeps its own (0.05 for energy policies, none for time ones);
    out of range it is refused where it is set."""
    from easlurm.config import check_setting, load_config
    from easlurm.priority.daemon import Daemon, DaemonConfig

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no user file
    nowhere = tmp_path / "none.yaml"
    sched = load_config(environ={}, system_file=nowhere).section("sched")
    assert sched["spread_slack"] is None and "spread_slack" not in policy_params("zeus", sched)
    env = {"EASLURM_SCHED__SPREAD_SLACK": "0"}
    sched = load_config(environ=env, system_file=nowhere).section("sched")
    never = get_policy("zeus", **policy_params("zeus", sched))
    assert never.spread_slack == 0.0
    pending = job("resnet50", malleable=False)
    nodes = (node("a0", 2), node("a1", 2))
    assert not never.decide(ClusterSnapshot(100.0, nodes, pending=(pending,)), oracle).starts
    daemon = Daemon(None, DaemonConfig(policy="zeus", spread_slack=0.0), oracle=oracle)  # type: ignore[arg-type]
    assert daemon.policy.spread_slack == 0.0
    assert Daemon(None, DaemonConfig(policy="zeus"), oracle=oracle).policy.spread_slack == 0.05  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="f: must be between 0 and 10"):
        check_setting("sched.spread_slack", -0.1, "f")
