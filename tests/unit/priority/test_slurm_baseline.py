"""`slurm` and `static-cap`: Slurm's multifactor priority and backfill, rigid requests, a site-wide cap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from easlurm.errors import ConfigError
from easlurm.model import Oracle
from easlurm.priority.backfill import Profile
from easlurm.priority.policies import get_policy, known_policy
from easlurm.priority.policies.slurm_baseline import DAY_S, SlurmBaseline
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob

A100 = NodeState("a0", "a100-40gb", 8, 8, 55.0, 400.0, 100.0)
H100 = NodeState("h0", "h100-sxm", 8, 8, 70.0, 700.0, 200.0)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def job(job_id: str, **kw: object) -> PendingJob:
    base = dict(
        job_id=job_id,
        user="u0",
        submit_s=0.0,
        model="resnet50",
        total_steps=2000,
        batch_options=(256,),
        gpu_options=(1,),
        precision="fp32-strict",
    )
    base.update(kw)
    return PendingJob(**base)  # type: ignore[arg-type]


def snap(pending: tuple[PendingJob, ...], nodes=(A100,), running=(), **kw: object) -> ClusterSnapshot:
    return ClusterSnapshot(
        time_s=kw.pop("time_s", 100.0), nodes=nodes, running=running, pending=pending, **kw
    )  # type: ignore[arg-type]


def started(s: ClusterSnapshot, oracle: Oracle, name: str = "slurm", **params: object) -> list[str]:
    return [st.job_id for st in get_policy(name, **params).decide(s, oracle).starts]


def test_each_multifactor_factor_moves_a_job_by_its_weight() -> None:
    """priority = 1000 * age/7 days + 1000 * GPUs/cluster GPUs + 10000 * fair share (Fair Tree rank)."""
    now = 3.5 * DAY_S
    jobs = (
        job("young", submit_s=now),
        job("old", submit_s=0.0),
        job("big", submit_s=now, gpu_options=(8,)),
        job("light", submit_s=now, user="light"),
    )
    s = snap(jobs, nodes=(A100, H100), time_s=now, user_gpu_s={"u0": 5000.0, "light": 10.0})
    prio = dict(zip([j.job_id for j in jobs], SlurmBaseline().priority(s), strict=True))
    assert prio["old"] - prio["young"] == pytest.approx(1000.0 * 0.5)
    assert prio["big"] - prio["young"] == pytest.approx(1000.0 * 7 / 16)
    # two users: the lighter one ranks 2/2, the heavier 1/2
    assert prio["light"] - prio["young"] == pytest.approx(10000.0 * 0.5)
    assert prio["young"] == pytest.approx(1000.0 / 16 + 10000.0 * 0.5)


def test_age_saturates_at_priority_max_age() -> None:
    """A job waiting longer than PriorityMaxAge (7 days) gains no more age priority."""
    jobs = (job("a", submit_s=0.0), job("b", submit_s=3 * DAY_S))
    prio = SlurmBaseline().priority(snap(jobs, time_s=30 * DAY_S))
    assert prio[0] == pytest.approx(prio[1])


@pytest.mark.parametrize(
    ("rule", "jobs", "usage", "first"),
    [
        (
            "age: the older of two equal jobs",
            (job("new", submit_s=90.0, gpu_options=(2,)), job("old", submit_s=0.0, gpu_options=(2,))),
            {},
            "old",
        ),
        (
            "size: the larger request, though submitted later",
            (job("small", submit_s=0.0), job("large", submit_s=50.0, gpu_options=(2,))),
            {},
            "large",
        ),
        (
            "fair share: the user who used fewer GPU-seconds, though submitted later",
            (
                job("heavy", user="heavy", submit_s=0.0, gpu_options=(2,)),
                job("light", user="light", submit_s=50.0, gpu_options=(2,)),
            ),
            {"heavy": 1e5, "light": 10.0},
            "light",
        ),
    ],
)
def test_the_higher_priority_job_gets_the_last_free_gpus(rule, jobs, usage, first, oracle) -> None:
    """With GPUs for only one of two jobs, the higher-priority one starts (the other would delay it)."""
    two = dataclasses.replace(A100, free_gpus=2)
    assert started(snap(jobs, nodes=(two,), user_gpu_s=usage), oracle) == [first], rule


def _blocked_node() -> tuple[NodeState, RunningJob]:
    """One 8-GPU node with 4 GPUs busy until t=1000 by the running job's time limit."""
    node = dataclasses.replace(A100, free_gpus=4)
    running = RunningJob("r0", "u9", "a0", "a100-40gb", 4, 256, 1000.0, 100.0, time_limit_s=900.0)
    return node, running


def test_backfill_starts_a_short_job_in_the_gap_but_not_a_long_one(oracle: Oracle) -> None:
    """The 8-GPU top job is reserved at t=1000, when the running job's time limit ends. A lower-priority
    job fits the 4 free GPUs now: the short one (ends before 1000) starts, the long one would delay the
    reservation and waits, though it ranks above the short one."""
    node, running = _blocked_node()
    jobs = (
        job("top", submit_s=0.0, gpu_options=(8,), time_limit_s=3600.0),
        job("long", submit_s=10.0, time_limit_s=5000.0),
        job("short", submit_s=20.0, time_limit_s=600.0),
    )
    assert started(snap(jobs, nodes=(node,), running=(running,)), oracle) == ["short"]
    without_top = snap(jobs[1:], nodes=(node,), running=(running,))
    assert started(without_top, oracle) == ["long", "short"]


def test_a_job_reserved_later_than_the_backfill_window_reserves_nothing(oracle: Oracle) -> None:
    """The top job's start (t=1000) lies beyond a 600 s bf_window: no reservation, the long job starts."""
    node, running = _blocked_node()
    jobs = (
        job("top", submit_s=0.0, gpu_options=(8,), time_limit_s=3600.0),
        job("long", submit_s=10.0, time_limit_s=5000.0),
    )
    s = snap(jobs, nodes=(node,), running=(running,))
    assert started(s, oracle, bf_window_s=600.0) == ["long"]


def test_without_a_time_limit_a_job_plans_with_a_multiple_of_its_predicted_run(oracle: Oracle) -> None:
    """No time limit: limit_factor x the predicted run time at the request; a running job likewise
    holds its GPUs for limit_factor x its expected run."""
    policy = SlurmBaseline(limit_factor=3.0)
    assert policy.time_limit_s(job("j"), np.array([100.0, 400.0])) == pytest.approx(1200.0)
    assert policy.time_limit_s(job("j", time_limit_s=50.0), np.array([400.0])) == 50.0
    r = RunningJob("r", "u", "a0", "a100-40gb", 1, 256, 300.0, 100.0, expected_end_s=300.0)
    assert policy.planned_end_s(snap((), running=(r,)))["r"] == pytest.approx(100.0 + 3.0 * 200.0)


def test_requests_are_rigid_and_run_at_the_default_limit(oracle: Oracle) -> None:
    """The first GPU count and batch, on the requested type, with no power limit, even where other
    options would be faster."""
    p = job("j", gpu_options=(2, 8, 4), batch_options=(128, 512), gpu_types=("h100",), malleable=True)
    (st,) = get_policy("slurm").decide(snap((p,), nodes=(A100, H100)), oracle).starts
    assert (st.n_gpus, st.batch, st.gpu_type, st.node, st.power_limit_w) == (2, 128, "h100-sxm", "h0", None)


@pytest.mark.parametrize(
    ("name", "a100_w", "h100_w"),
    [("static-cap", 280.0, 490.0), ("static-cap-60", 240.0, 420.0), ("static-cap-20", 100.0, 200.0)],
)
def test_static_cap_is_the_fraction_of_tdp_clamped_to_the_minimum_limit(name, a100_w, h100_w, oracle) -> None:
    """Every start is limited to frac x TDP (static-cap: 0.7), never under the GPU's minimum limit, a
    job's SPEC `nolimit` included (the limit is set on the GPU)."""
    jobs = (job("a", gpu_types=("a100",), default_power_limit=True), job("h", gpu_types=("h100",)))
    limits = {
        st.gpu_type: st.power_limit_w
        for st in get_policy(name).decide(snap(jobs, nodes=(A100, H100)), oracle).starts
    }
    assert limits == {"a100-40gb": a100_w, "h100-sxm": h100_w}


def test_static_cap_keeps_slurms_order_and_a_full_cap_is_no_cap(oracle: Oracle) -> None:
    """static-cap starts what slurm starts; at 100 % of TDP it sets no limit."""
    node, running = _blocked_node()
    jobs = (
        job("top", submit_s=0.0, gpu_options=(8,), time_limit_s=3600.0),
        job("long", submit_s=10.0, time_limit_s=5000.0),
        job("short", submit_s=20.0, time_limit_s=600.0),
    )
    s = snap(jobs, nodes=(node,), running=(running,))
    assert started(s, oracle, "static-cap-70") == started(s, oracle) == ["short"]
    assert [st.power_limit_w for st in get_policy("static-cap-100").decide(s, oracle).starts] == [None]


@pytest.mark.parametrize(
    "name", ["static-cap-0", "static-cap-150", "static-cap-x", "static-cap-", "static-cap-7.5"]
)
def test_bad_static_cap_names_are_config_errors(name: str) -> None:
    assert not known_policy(name)
    with pytest.raises(ConfigError, match="whole percentage of TDP"):
        get_policy(name)


def test_bad_parameters_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="cap_frac"):
        get_policy("static-cap", cap_frac=1.5)
    with pytest.raises(ConfigError, match="set by the name"):
        get_policy("static-cap-60", cap_frac=0.8)
    with pytest.raises(ConfigError, match="limit_factor"):
        get_policy("slurm", limit_factor=0.5)
    assert get_policy("static-cap", cap_frac=0.55).cap_frac == 0.55
    assert known_policy("static-cap-85") and known_policy("slurm")


def test_cli_refuses_a_bad_cap_with_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from easlurm.cli import main

    assert main(["sim", "run", "--policy", "static-cap-150", "--scenario", "B", "--hours", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "static-cap-150" in err


def test_profile_window_minimum_and_reservations() -> None:
    """Free GPUs over time: a release at t=10 frees 4 GPUs; a reservation [10, 20) takes 3 of them back."""
    p = Profile.build(0.0, [2, 8], [(10.0, 0, 4), (float("inf"), 1, 8)])
    assert p.window_min(5.0)[:, 0].tolist() == [2, 6]
    assert p.window_min(float("inf"))[0].tolist() == [2, 8]
    p.take(10.0, 20.0, [(0, 3)])
    assert p.times_s.tolist() == [0.0, 10.0, 20.0]
    assert p.window_min(15.0)[:, 0].tolist() == [2, 3, 6]
