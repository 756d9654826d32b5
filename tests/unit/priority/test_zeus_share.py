"""Zeus-share: a waiting shareable one-GPU job joins a running one when the pair gains, never otherwise."""

from __future__ import annotations

import dataclasses

import pytest

from easlurm.errors import ConfigError
from easlurm.model import Oracle, Placements, get_workload
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob

GPU = "h100-sxm"
NOW = 1000.0


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def snapshot(
    *,
    sharing: str = "time-slice",
    host_model: str = "bert-base",
    host_batch: int = 16,
    host_share: bool = True,
    host_deadline_s: float | None = None,
    job_share: bool = True,
    job_deadline_s: float | None = None,
    free: int = 0,
) -> ClusterSnapshot:
    """One node of two H100: one GPU runs `host`, the other a job that cannot share; one job waits."""
    node = NodeState("h0", GPU, 2, free, 70.0, 700.0, 200.0, sharing=sharing)
    host = RunningJob(
        "host",
        "u1",
        "h0",
        GPU,
        1,
        host_batch,
        250.0,
        0.0,
        deadline_s=host_deadline_s,
        expected_end_s=NOW + 3600.0,
        shareable=host_share,
        model=host_model,
        precision="bf16",
    )
    other = RunningJob(
        "other", "u2", "h0", GPU, 1, 16, 250.0, 0.0, model="bert-base", expected_end_s=NOW + 60
    )
    job = PendingJob(
        "job",
        "u3",
        NOW - 10.0,
        "distilbert",
        total_steps=20000,
        remaining_steps=20000.0,
        batch_options=(16,),
        gpu_options=(1,),
        deadline_s=job_deadline_s,
        shareable=job_share,
    )
    return ClusterSnapshot(NOW, (node,), running=(host, other), pending=(job,))


def test_joins_a_complementary_running_job(oracle: Oracle) -> None:
    """Two launch-bound jobs: the waiting one starts on the host's GPU, no free GPU taken."""
    decision = get_policy("zeus-share").decide(snapshot(), oracle)
    (start,) = decision.starts
    assert (start.job_id, start.node, start.n_gpus, start.colocate_with) == ("job", "h0", 1, "host")
    assert start.predicted_power_w is not None and 0 < start.predicted_power_w < 700.0


def test_zeus_never_colocates(oracle: Oracle) -> None:
    assert get_policy("zeus").decide(snapshot(), oracle).starts == ()


def test_a_free_gpu_is_taken_exclusively_first(oracle: Oracle) -> None:
    (start,) = get_policy("zeus-share").decide(snapshot(free=1), oracle).starts
    assert start.colocate_with is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"sharing": "none"}, "the node does not share GPUs"),
        ({"job_share": False}, "the waiting job did not declare share"),
        ({"host_share": False}, "the running job did not declare share"),
        ({"host_model": "gpt2", "host_batch": 16}, "the host saturates the GPU: the pair would lose"),
        ({"host_deadline_s": NOW + 3650.0}, "the host's deadline is at risk (it makes it alone)"),
    ],
)
def test_refuses_to_colocate(oracle: Oracle, change: dict[str, object], why: str) -> None:
    decision = get_policy("zeus-share").decide(snapshot(**change), oracle)  # type: ignore[arg-type]
    assert decision.starts == (), why


def test_refuses_to_colocate_where_the_shared_end_misses_the_waiting_jobs_deadline(oracle: Oracle) -> None:
    """The waiting job makes its deadline alone (10 % to spare, by the oracle's own step time) but not
    shared (slower beside the host, with the policy's margin): it waits. Twice its time alone: it joins."""
    alone_s = 20000 * float(
        oracle.predict(get_workload("distilbert", precision="bf16"), Placements.of(1, 16, GPU)).step_time_s[0]
    )
    assert get_policy("zeus-share").decide(snapshot(job_deadline_s=NOW + 1.1 * alone_s), oracle).starts == ()
    (start,) = get_policy("zeus-share").decide(snapshot(job_deadline_s=NOW + 2.0 * alone_s), oracle).starts
    assert start.colocate_with == "host"


def test_deadlines_far_enough_allow_colocation(oracle: Oracle) -> None:
    """The refusals above are the deadlines' doing: with room to spare the same pair is co-located; the
    waiting job would meet its tight deadline (600 s) alone."""
    from easlurm.model import Placements, get_workload

    alone = oracle.predict(get_workload("distilbert", precision="bf16"), Placements.of(1, 16, GPU))
    assert 20000 * float(alone.step_time_s[0]) < 600.0
    snap = snapshot(job_deadline_s=NOW + 36000.0, host_deadline_s=NOW + 36000.0)
    assert [s.colocate_with for s in get_policy("zeus-share").decide(snap, oracle).starts] == ["host"]


def test_host_with_a_partner_or_unknown_model_is_not_offered(oracle: Oracle) -> None:
    snap = snapshot()
    paired = dataclasses.replace(snap.running[0], colocated_with="someone")
    unknown = dataclasses.replace(snap.running[0], model=None)
    for host in (paired, unknown):
        alt = dataclasses.replace(snap, running=(host, snap.running[1]))
        assert get_policy("zeus-share").decide(alt, oracle).starts == ()


def test_bad_parameters_are_one_line() -> None:
    with pytest.raises(ConfigError, match="zeus-share: need min_gain >= -1"):
        get_policy("zeus-share", min_speed=0.0)


def pair_limit(decision_starts: tuple[object, ...]) -> float | None:
    (start,) = decision_starts
    assert start.colocate_with == "host"  # type: ignore[attr-defined]
    return start.power_limit_w  # type: ignore[attr-defined]


def test_picks_the_pair_limit_its_objective_prefers(oracle: Oracle) -> None:
    """bert-base + distilbert on one H100 draw 350 W at the default limit. Zeus-share weighs the GPU's limits
    and takes the one with the lowest energy x GPU time per unit of work among those that slow neither job
    by more than max_slowdown (0.05) against the pair at the default limit; the join carries it."""
    from easlurm.model import get_workload
    from easlurm.model.colocation import GpuFacts, Sharing, corun, predict_solo

    policy = get_policy("zeus-share")
    chosen = pair_limit(policy.decide(snapshot(), oracle).starts)
    a = predict_solo(oracle, get_workload("bert-base", precision="bf16"), 16, GPU)
    b = predict_solo(oracle, get_workload("distilbert", precision="bf16"), 16, GPU)
    assert a is not None and b is not None
    gpu = GpuFacts.of(oracle.catalogue.get(GPU), oracle.params)
    base = corun(a, b, gpu, Sharing.TIME_SLICE, oracle.params)
    costs = {}
    for limit in policy.pair_limits(gpu.tdp_w, gpu.min_limit_w):  # type: ignore[attr-defined]
        co = corun(a, b, gpu, Sharing.TIME_SLICE, oracle.params, limit)
        if all(co.speed[i] * 1.05 >= base.speed[i] for i in range(2)):
            costs[limit] = co.power_w / co.throughput**2
    assert chosen is not None and chosen < gpu.tdp_w
    assert costs[chosen] == min(costs.values())
    assert len(costs) > 2  # a real choice: the default, limits above the pair's draw, and caps
    # a looser slowdown bound lets a deeper limit in
    deeper = pair_limit(get_policy("zeus-share", max_slowdown=0.3).decide(snapshot(), oracle).starts)
    assert deeper is not None and deeper < chosen


def test_never_shares_when_the_pair_costs_more_energy_than_the_jobs_alone(oracle: Oracle) -> None:
    """With max_slowdown 0 no cap is allowed on the pair; at the default limit it draws 350 W, more energy
    above idle for the same work than bert-base (203 W) and distilbert capped at 210 W for free alone: the
    job waits. Where the jobs alone would run at the default limit too (power_limits false), the pair
    saves energy and is shared, at the default limit."""
    assert get_policy("zeus-share", max_slowdown=0.0).decide(snapshot(), oracle).starts == ()
    assert pair_limit(get_policy("zeus-share", power_limits=False).decide(snapshot(), oracle).starts) is None


def test_share_always_settings_lift_every_test_of_the_rule(oracle: Oracle) -> None:
    """`share-always` (campaigns/colocation.yaml) is zeus-share without the rule's tests: with the energy and
    objective ratios lifted, the pair the default rule refuses (max_slowdown 0) is shared."""
    assert get_policy("zeus-share", max_slowdown=0.0).decide(snapshot(), oracle).starts == ()
    lifted = get_policy(
        "zeus-share",
        max_slowdown=0.0,
        min_gain=-1.0,
        min_speed=0.01,
        max_energy_ratio=100.0,
        max_cost_ratio=100.0,
    )
    assert lifted.decide(snapshot(), oracle).starts
    with pytest.raises(ConfigError, match="max_cost_ratio"):
        get_policy("zeus-share", max_cost_ratio=0.0)
