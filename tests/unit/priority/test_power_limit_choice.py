"""Energy policies choose each job's GPU power limit with its placement, within the site's slowdown bound;
the exclusive baselines keep the default limit; a job's SPEC `nolimit` keeps it at the default."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from easlurm.config import check_setting
from easlurm.energy.spec import parse_spec
from easlurm.errors import ConfigError
from easlurm.model import Oracle, Placements, get_workload
from easlurm.priority.packing import DEFAULT_MAX_SLOWDOWN, LIMIT_STEPS
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob

H100 = NodeState("h0", "h100-sxm", 8, 8, 70.0, 700.0, 200.0)
ENERGY = ("zeus", "hades", "aurachronos", "zeus-share")
BASELINES = ("pollux", "pollux-rigid", "themis", "themis-rigid", "chronos", "chronos-malleable")


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def job(job_id: str = "j", **kw: Any) -> PendingJob:
    base: dict[str, Any] = dict(
        job_id=job_id,
        user="u0",
        submit_s=0.0,
        model="resnet50",
        total_steps=2000,
        remaining_steps=2000.0,
        batch_options=(256,),
        gpu_options=(4,),
        precision="fp32-strict",
        malleable=False,
    )
    base.update(kw)
    return PendingJob(**base)


#: the snapshot's time: a job submitted at 0 has waited this long
NOW_S = 100.0


def snap(*pending: PendingJob) -> ClusterSnapshot:
    return ClusterSnapshot(time_s=NOW_S, nodes=(H100,), running=(), pending=pending)


def within_budget(t: Any, t0: Any, wait_s: float = NOW_S, slack: float = DEFAULT_MAX_SLOWDOWN) -> Any:
    """The time a limit adds to the run is at most `slack` of the job's JCT: its wait and its default run."""
    return t - t0 <= slack * (wait_s + t0) + 1e-9


def predict(oracle: Oracle, limits_w: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(time, power) of the test job (4 H100, batch 256) at each limit (NaN: the default)."""
    n = len(limits_w)
    pred = oracle.predict(
        get_workload("resnet50", precision="fp32-strict"),
        Placements.of(
            np.full(n, 4), np.full(n, 256), np.array(["h100-sxm"] * n, dtype=object), np.array(limits_w)
        ),
    )
    sps = np.asarray(pred.samples_per_s, dtype=float)
    return 2000 * 256 / sps, np.asarray(pred.power_w, dtype=float)


@pytest.mark.parametrize("name", ENERGY)
def test_an_energy_policy_lowers_the_limit_when_it_saves_within_the_bound(oracle: Oracle, name: str) -> None:
    (start,) = get_policy(name).decide(snap(job()), oracle).starts
    assert start.power_limit_w is not None and 200.0 <= start.power_limit_w < 700.0
    (t0, t), (p0, p) = (np.asarray(v) for v in predict(oracle, [math.nan, start.power_limit_w]))
    assert within_budget(t, t0)  # within the default bound
    assert p * t * t < p0 * t0 * t0  # and it lowers the EDP Zeus minimises
    # the choice is the minimum-EDP limit among all candidates within the bound
    cands = [math.nan] + [f * 700.0 for f in LIMIT_STEPS if f * 700.0 >= 200.0]
    times, powers = predict(oracle, cands)
    ok = within_budget(times, times[0])
    best = cands[int(np.argmin(np.where(ok, powers * times**2, np.inf)))]
    assert start.power_limit_w == pytest.approx(best)


def test_with_no_limit_within_the_bound_the_default_is_kept(oracle: Oracle) -> None:
    cands = [math.nan] + [f * 700.0 for f in LIMIT_STEPS if f * 700.0 >= 200.0]
    times, powers = predict(oracle, cands)
    # the premise: every candidate limit either costs time or saves nothing (it does not bind)
    assert ((times[1:] > times[0]) | (powers[1:] >= powers[0])).all()
    (start,) = get_policy("zeus", max_slowdown=0.0).decide(snap(job()), oracle).starts
    assert start.power_limit_w is None
    loose = get_policy("zeus", max_slowdown=0.5).decide(snap(job()), oracle).starts[0]
    bounded = get_policy("zeus").decide(snap(job()), oracle).starts[0]
    assert loose.power_limit_w is not None and bounded.power_limit_w is not None
    assert loose.power_limit_w <= bounded.power_limit_w  # a looser bound never takes a higher limit


def test_the_bound_is_a_share_of_the_jct_so_a_job_that_waited_may_be_capped_deeper(oracle: Oracle) -> None:
    """A job submitted now may run max_slowdown slower than at the default limit; the same job after a wait
    spends max_slowdown of its wait too (the JCT budget its user sees), and never gets a higher limit."""
    fresh = get_policy("zeus").decide(snap(job(submit_s=NOW_S)), oracle).starts[0]
    waited = get_policy("zeus").decide(snap(job(submit_s=NOW_S - 3000.0)), oracle).starts[0]
    (t0, t_fresh, t_waited), _ = predict(
        oracle, [math.nan, fresh.power_limit_w or math.nan, waited.power_limit_w or math.nan]
    )
    assert within_budget(t_fresh, t0, wait_s=0.0) and t_fresh <= (1 + DEFAULT_MAX_SLOWDOWN) * t0 + 1e-9
    assert within_budget(t_waited, t0, wait_s=3000.0) and t_waited > (1 + DEFAULT_MAX_SLOWDOWN) * t0
    assert waited.power_limit_w is not None and fresh.power_limit_w is not None
    assert waited.power_limit_w < fresh.power_limit_w


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_never_set_a_limit_even_when_the_job_offers_some(oracle: Oracle, name: str) -> None:
    offered = job(power_limit_options_w=(300.0, 400.0), malleable=True, gpu_options=(4, 8))
    for start in get_policy(name).decide(snap(offered), oracle).starts:
        assert start.power_limit_w is None


@pytest.mark.parametrize("name", (*ENERGY, "charon-pl"))
def test_a_job_that_opts_out_runs_at_the_default_limit(oracle: Oracle, name: str) -> None:
    (start,) = get_policy(name).decide(snap(job(default_power_limit=True)), oracle).starts
    assert start.power_limit_w is None
    # and a policy built without limits (the replay's NAME+nolimit rows) sets none for anyone
    (start,) = get_policy(name, power_limits=False).decide(snap(job()), oracle).starts
    assert start.power_limit_w is None


def test_one_prediction_per_job_template_covers_every_placement_and_limit(oracle: Oracle) -> None:
    calls: list[int] = []

    class Counting:
        catalogue = oracle.catalogue

        def predict(self, wl: Any, placements: Placements) -> Any:
            calls.append(len(placements.n_gpus))
            return oracle.predict(wl, placements)

    policy = get_policy("zeus")
    malleable = job(malleable=True, gpu_options=(4, 1, 2, 8), batch_options=(256, 128))
    policy.decide(snap(malleable, job("k", **{"malleable": True, "gpu_options": (4, 1, 2, 8)})), Counting())
    assert len(calls) == 2 and calls[0] == 4 * 2 * (1 + sum(f * 700 >= 200 for f in LIMIT_STEPS))


def test_nolimit_in_the_spec_reaches_the_pending_job() -> None:
    spec = parse_spec("model=vit-b16,steps=100,batch=64,nolimit")
    assert spec.nolimit and spec.hints()["nolimit"] is True
    assert not parse_spec("model=vit-b16,steps=100,batch=64").nolimit
    with pytest.raises(ConfigError, match="given twice"):
        parse_spec("nolimit,nolimit")


def test_max_slowdown_is_checked_where_it_is_set() -> None:
    assert check_setting("sched.max_slowdown", 0.1, "f") == 0.1
    with pytest.raises(ConfigError, match="f: must be between 0 and 10"):
        check_setting("sched.max_slowdown", -0.1, "f")
    with pytest.raises(ConfigError, match="max_slowdown"):
        get_policy("zeus", max_slowdown=-1.0)


def test_a_noisy_oracle_errs_alike_at_every_limit_of_a_placement() -> None:
    """Prediction error belongs to a workload on its GPUs, not to one limit: with independent draws per
    limit a policy would pick a limit whose noise happens to look fast, whatever the bound."""
    from easlurm.model import NoisyOracle

    limits = [math.nan, 300.0, 400.0, 500.0]
    pl = Placements.of(np.array([4, 4, 4, 4, 2]), 256, "h100-sxm", np.array([*limits, math.nan]))
    wl = get_workload("resnet50", precision="fp32-strict")
    clean, noisy = Oracle().predict(wl, pl), NoisyOracle(sigma=0.1, seed=3).predict(wl, pl)
    ratio = noisy.step_time_s / clean.step_time_s
    assert np.allclose(ratio[:4], ratio[0]) and not np.isclose(ratio[4], ratio[0])
    for seed in range(5):
        (start,) = get_policy("zeus", max_slowdown=0.0).decide(snap(job()), NoisyOracle(0.1, seed)).starts
        assert start.power_limit_w is None
