"""Each policy's rule on small hand-made snapshots, with the analytical (noiseless) oracle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from easlurm.errors import ConfigError
from easlurm.model import Oracle, Placements, get_workload
from easlurm.priority.policies import POLICY_NAMES, get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob, RunningJob

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
        remaining_steps=2000.0,
        batch_options=(256, 128, 512),
        gpu_options=(4, 1, 2, 8),
        precision="fp32-strict",
    )
    base.update(kw)
    return PendingJob(**base)  # type: ignore[arg-type]


def snap(pending: tuple[PendingJob, ...], nodes=(A100, H100), running=(), **kw: object) -> ClusterSnapshot:
    return ClusterSnapshot(
        time_s=kw.pop("time_s", 100.0), nodes=nodes, running=running, pending=pending, **kw
    )  # type: ignore[arg-type]


def check_valid(s: ClusterSnapshot, d: Decision) -> None:
    """Starts fit the free GPUs (after preemptions) and no job starts twice."""
    free = {n.name: n.free_gpus for n in s.nodes}
    for r in s.running:
        if r.job_id in d.preempt:
            free[r.node] += r.n_gpus
    ids = [st.job_id for st in d.starts]
    assert len(ids) == len(set(ids))
    pending = {p.job_id for p in s.pending}
    for st in d.starts:
        assert st.job_id in pending
        free[st.node] -= st.n_gpus
        assert free[st.node] >= 0
        assert st.gpu_type == next(n.gpu_type for n in s.nodes if n.name == st.node)


def run_time(oracle: Oracle, p: PendingJob, n: int, b: int, gpu: str) -> float:
    pred = oracle.predict(get_workload(p.model, precision=p.precision), Placements.of([n], [b], [gpu]))
    return p.remaining_samples / float(pred.samples_per_s[0])


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_gives_valid_pure_decisions(name: str, oracle: Oracle) -> None:
    jobs = tuple(
        job(f"j{i}", submit_s=float(i), user=f"u{i % 3}", urgent=i == 2, deadline_s=9e3 if i == 2 else None)
        for i in range(6)
    )
    running = (RunningJob("r0", "u1", "h0", "h100-sxm", 2, 256, 1200.0, 0.0),)
    s = snap(
        jobs,
        nodes=(A100, dataclasses.replace(H100, free_gpus=6)),
        running=running,
        user_gpu_s={"u0": 10.0, "u1": 5000.0},
        power_budget_w=6000.0,
    )
    policy = get_policy(name)
    d1 = policy.decide(s, oracle)
    check_valid(s, d1)
    assert d1.starts, f"{name} started nothing on an idle cluster"
    assert get_policy(name).decide(ClusterSnapshot.from_dict(s.to_dict()), oracle) == d1
    assert policy.decide(s, oracle) == d1


def test_pollux_takes_the_fastest_placement_and_zeus_the_least_edp(oracle: Oracle) -> None:
    p = job("j", gpu_options=(1, 2, 4, 8), batch_options=(256,))
    s = snap((p,))
    fast = get_policy("pollux").decide(s, oracle).starts[0]
    lean = get_policy("zeus").decide(s, oracle).starts[0]
    options = [(n, g) for n in (1, 2, 4, 8) for g in ("a100-40gb", "h100-sxm")]
    times = {o: run_time(oracle, p, o[0], 256, o[1]) for o in options}
    assert (fast.n_gpus, fast.gpu_type) == min(times, key=lambda o: times[o])
    w = get_workload("resnet50", precision="fp32-strict")
    pred = oracle.predict(w, Placements.of([o[0] for o in options], 256, [o[1] for o in options]))
    edp = pred.power_w * (p.remaining_samples / pred.samples_per_s) ** 2
    assert (lean.n_gpus, lean.gpu_type) == options[int(np.argmin(edp))]


def test_rigid_policy_uses_only_the_requested_option(oracle: Oracle) -> None:
    p = job("j", gpu_options=(2, 8, 4), batch_options=(128, 512))
    st = get_policy("pollux-rigid").decide(snap((p,)), oracle).starts[0]
    assert (st.n_gpus, st.batch) == (2, 128)
    st = get_policy("pollux").decide(snap((p,)), oracle).starts[0]
    assert (st.n_gpus, st.batch) != (2, 128)


def test_themis_follows_the_thesis_share_formula_and_fair_share_reverses_it(oracle: Oracle) -> None:
    one = NodeState("a0", "a100-40gb", 8, 1, 55.0, 400.0, 100.0)
    jobs = (job("light", user="light", gpu_options=(1,)), job("heavy", user="heavy", gpu_options=(1,)))
    s = snap(jobs, nodes=(one,), user_gpu_s={"light": 10.0, "heavy": 1e5})
    assert get_policy("themis").decide(s, oracle).starts[0].job_id == "heavy"
    assert get_policy("themis", fair_share=True).decide(s, oracle).starts[0].job_id == "light"


def test_chronos_serves_urgent_jobs_first(oracle: Oracle) -> None:
    one = NodeState("a0", "a100-40gb", 8, 1, 55.0, 400.0, 100.0)
    jobs = (
        job("be", gpu_options=(1,), submit_s=0.0),
        job("urgent", gpu_options=(1,), urgent=True, deadline_s=1e6),
    )
    for name in ("chronos", "chronos-malleable", "aurachronos"):
        assert get_policy(name).decide(snap(jobs, nodes=(one,)), oracle).starts[0].job_id == "urgent"
    assert get_policy("pollux").decide(snap(jobs, nodes=(one,)), oracle).starts[0].job_id == "be"


def test_aurachronos_preempts_the_cheapest_victim_for_an_urgent_job(oracle: Oracle) -> None:
    full = (dataclasses.replace(A100, free_gpus=0),)
    running = (
        RunningJob("old", "u1", "a0", "a100-40gb", 4, 256, 1500.0, start_s=0.0),
        RunningJob("new", "u1", "a0", "a100-40gb", 4, 256, 1500.0, start_s=5000.0),
    )
    urgent = job("u", gpu_options=(4,), urgent=True, submit_s=6000.0)
    need = run_time(oracle, urgent, 4, 256, "a100-40gb")
    urgent = dataclasses.replace(urgent, deadline_s=6000.0 + 2 * need)
    s = snap((urgent,), nodes=full, running=running, time_s=6000.0)
    d = get_policy("aurachronos", preempt_cooldown_s=300.0).decide(s, oracle)
    assert d.preempt == ("new",)  # 1000 s of work lost instead of 6000 s
    assert [st.job_id for st in d.starts] == ["u"]
    check_valid(s, d)
    # inside the cooldown, the recent job is spared and the old one goes
    d = get_policy("aurachronos", preempt_cooldown_s=2000.0).decide(s, oracle)
    assert d.preempt == ("old",)
    # non-preemptive policies wait
    assert not get_policy("chronos-malleable").decide(s, oracle)


def test_charon_holds_what_does_not_fit_the_budget_and_charon_pl_caps_it(oracle: Oracle) -> None:
    p = job("big", model="vit-b16", gpu_options=(8,), batch_options=(512,), precision="fp32-strict")
    s = snap((p,), nodes=(H100,), power_budget_w=3000.0)
    d = get_policy("charon").decide(s, oracle)
    assert not d.starts and d.hold == ("big",)
    d = get_policy("charon-pl").decide(s, oracle)
    assert len(d.starts) == 1
    st = d.starts[0]
    assert st.power_limit_w is not None and st.power_limit_w < 700.0
    # guaranteed: budgeted at the limit itself
    assert s.power_w - 8 * 70.0 + st.n_gpus * st.power_limit_w <= 3000.0


def test_charon_takes_a_smaller_placement_that_fits_the_budget_and_charon_thesis_waits(
    oracle: Oracle,
) -> None:
    """A job whose minimum-EDP placement (8 H100) exceeds the power left starts on what the budget
    allows (here the idle A100 node) instead of leaving it idle; the thesis's Charon holds it."""
    p = job("big", model="vit-b16", gpu_options=(8, 4, 2, 1), batch_options=(512,), precision="fp32-strict")
    s = snap((p,), power_budget_w=3000.0)
    thesis = get_policy("charon-thesis").decide(s, oracle)
    assert not thesis.starts and thesis.hold == ("big",)
    d = get_policy("charon").decide(s, oracle)
    assert len(d.starts) == 1 and not d.hold
    st = d.starts[0]
    idle_w = 55.0 if st.gpu_type == "a100-40gb" else 70.0
    assert s.power_w + (st.predicted_power_w or 0.0) - st.n_gpus * idle_w <= 3000.0
    assert st.n_gpus < 8 or st.gpu_type == "a100-40gb"
    assert get_policy("charon", fit_budget=False).decide(s, oracle).hold == ("big",)


def test_charon_projected_power_accumulates_within_a_cycle(oracle: Oracle) -> None:
    jobs = tuple(job(f"j{i}", gpu_options=(2,), batch_options=(512,)) for i in range(4))
    s = snap(jobs, nodes=(H100,), power_budget_w=2600.0)
    d = get_policy("charon").decide(s, oracle)
    added = sum((st.predicted_power_w or 0.0) - st.n_gpus * 70.0 for st in d.starts)
    assert 0 < len(d.starts) < 4
    assert s.power_w + added <= 2600.0
    assert len(d.hold) == 4 - len(d.starts)


def _running(job_id: str, start_s: float, power_w: float, predicted_w: float, **kw: object) -> RunningJob:
    base = dict(job_id=job_id, user="u0", node="h0", gpu_type="h100-sxm", n_gpus=2, batch=256)
    base.update(kw)
    return RunningJob(power_w=power_w, start_s=start_s, predicted_power_w=predicted_w, **base)  # type: ignore[arg-type]


def test_charon_sheds_the_most_recent_sheddable_start_when_measured_power_is_over_budget(
    oracle: Oracle,
) -> None:
    h = dataclasses.replace(H100, free_gpus=2)
    running = (
        _running("old", 10.0, 1200.0, 1150.0),
        _running("urgent-new", 90.0, 1300.0, 1000.0, urgent=True),
        _running("new", 80.0, 1300.0, 1000.0),
    )
    s = snap((job("w"),), nodes=(h,), running=running, power_budget_w=3500.0)
    assert s.power_w > 3500.0
    d = get_policy("charon").decide(s, oracle)
    # the urgent (non-requeueable) job is never shed; one shed brings the power back in budget
    assert d.preempt == ("new",) and not d.starts and d.hold == ("w",)
    # the thesis's Charon does not react to what it measures
    assert not get_policy("charon-thesis").decide(s, oracle).preempt
    # all under budget: nothing shed
    assert not get_policy("charon").decide(
        snap((), nodes=(h,), running=running[:1], power_budget_w=3500.0), oracle
    )


def test_learned_margin_follows_the_measured_over_predicted_power_of_running_jobs() -> None:
    from easlurm.priority.policies.charon import learned_margin

    exact = tuple(_running(f"r{i}", 0.0, 1000.0, 1000.0) for i in range(4))
    assert learned_margin(exact, 2.0, 3) == 0.0
    under = tuple(_running(f"r{i}", 0.0, 1000.0 * f, 1000.0) for i, f in enumerate((1.1, 1.2, 1.0, 1.3)))
    ratios = np.array([1.1, 1.2, 1.0, 1.3])
    assert learned_margin(under, 2.0, 3) == pytest.approx(ratios.mean() - 1 + 2 * ratios.std(ddof=1))
    assert learned_margin(under[:2], 2.0, 3) == 0.0  # too few to learn from
    no_prediction = tuple(dataclasses.replace(r, predicted_power_w=None) for r in under)
    assert learned_margin(no_prediction, 2.0, 1) == 0.0


def test_charon_pads_starts_by_the_learned_margin_and_a_requeued_jobs_observed_error(oracle: Oracle) -> None:
    jobs = tuple(job(f"j{i}", gpu_options=(2,), batch_options=(512,)) for i in range(2))
    pred = oracle.predict(
        get_workload("resnet50", precision="fp32-strict"), Placements.of([2], [512], ["h100-sxm"])
    )
    delta = float(pred.power_w[0]) - 2 * 70.0  # what one start adds, predicted
    h = dataclasses.replace(H100, free_gpus=4)

    def starts(running: tuple[RunningJob, ...], pending: tuple[PendingJob, ...] = jobs) -> int:
        base = snap(pending, nodes=(h,), running=running)
        s = dataclasses.replace(base, power_budget_w=base.power_w + 2.1 * delta)  # room for both, 5 % spare
        return len(get_policy("charon").decide(s, oracle).starts)

    exact = tuple(_running(f"r{i}", 0.0, 400.0, 400.0, n_gpus=1) for i in range(4))
    under = tuple(
        _running(f"r{i}", 0.0, 400.0 * f, 400.0, n_gpus=1) for i, f in enumerate((1.3, 1.5, 1.2, 1.4))
    )
    assert starts(exact) == 2
    assert starts(under) < 2
    # a job shed for drawing 50 % more than predicted is budgeted at that ratio when it comes back
    assert starts(exact, tuple(dataclasses.replace(p, observed_power_ratio=1.5) for p in jobs)) < 2


def test_charon_caps_a_start_at_the_power_left_and_holds_an_urgent_job_it_cannot_cap(oracle: Oracle) -> None:
    p = job("big", model="resnet50", gpu_options=(8,), batch_options=(512,), precision="fp32-strict")
    # the budget lies halfway between what the oracle predicts for this placement and its GPUs' TDP: admitted
    # on the prediction, capped at the power left per GPU (under the TDP)
    w = get_workload("resnet50", precision="fp32-strict")
    predicted = float(oracle.predict(w, Placements.of(8, 512, "h100-sxm")).power_w[0])
    assert predicted < 0.9 * 8 * H100.tdp_w
    budget = (predicted + 8 * H100.tdp_w) / 2.0
    s = snap((p,), nodes=(H100,), power_budget_w=budget)
    d = get_policy("charon").decide(s, oracle)
    assert len(d.starts) == 1
    st = d.starts[0]
    # whatever it really draws, the hardware keeps the cluster within the budget
    assert st.power_limit_w is not None and s.power_w - 8 * 70.0 + 8 * st.power_limit_w <= budget + 1e-6
    assert H100.min_power_limit_w <= st.power_limit_w < H100.tdp_w  # type: ignore[operator]
    assert get_policy("charon-thesis").decide(s, oracle).starts[0].power_limit_w is None
    # headroom under the GPUs' minimum limit: an urgent job (cannot be shed) waits, another starts
    low = dataclasses.replace(H100, min_power_limit_w=0.99 * H100.tdp_w)
    urgent = dataclasses.replace(p, urgent=True)
    assert get_policy("charon").decide(snap((urgent,), nodes=(low,), power_budget_w=budget), oracle).hold == (
        "big",
    )
    started = get_policy("charon").decide(snap((p,), nodes=(low,), power_budget_w=budget), oracle).starts
    assert len(started) == 1 and started[0].power_limit_w is None


def test_unknown_policy_and_parameter_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown policy"):
        get_policy("sjf")
    with pytest.raises(ConfigError, match="unknown parameter"):
        get_policy("zeus", cooldown=3)
    with pytest.raises(ConfigError):
        get_policy("charon-pl", limit_fractions=(1.5,))


def test_aurachronos_holds_an_urgent_job_until_a_victim_leaves_its_cooldown(oracle: Oracle) -> None:
    """A slow start would surely miss; waiting for a preemptible victim can still make the deadline."""
    nodes = (dataclasses.replace(A100, free_gpus=1),)
    running = (RunningJob("fresh", "u1", "a0", "a100-40gb", 7, 256, 2500.0, start_s=900.0),)
    urgent = job("u", gpu_options=(1, 8), batch_options=(512,), urgent=True, submit_s=1000.0)
    fast = run_time(oracle, urgent, 8, 512, "a100-40gb")
    slow = run_time(oracle, urgent, 1, 512, "a100-40gb")
    assert slow > 3 * fast
    urgent = dataclasses.replace(urgent, deadline_s=1000.0 + 2 * fast)
    s = snap((urgent,), nodes=nodes, running=running, time_s=1000.0)
    policy = get_policy("aurachronos", preempt_cooldown_s=300.0)
    d = policy.decide(s, oracle)
    assert not d.starts and not d.preempt and d.hold == ("u",)
    assert policy.wake_at_s(s, oracle) == pytest.approx(1200.0)
    later = dataclasses.replace(s, time_s=1200.0)
    d = policy.decide(later, oracle)
    assert d.preempt == ("fresh",) and d.starts[0].n_gpus == 8


@pytest.mark.parametrize("allowed", [("h100",), ("a100-40gb",)])
def test_jobs_only_land_on_their_allowed_gpu_types(allowed: tuple[str, ...], oracle: Oracle) -> None:
    jobs = tuple(job(f"j{i}", gpu_types=allowed, gpu_options=(2,)) for i in range(3))
    for name in ("pollux", "zeus", "charon-pl"):
        d = get_policy(name).decide(snap(jobs, power_budget_w=1e5), oracle)
        assert len(d.starts) == 3
        assert all(st.gpu_type.startswith(allowed[0].split("-")[0]) for st in d.starts)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_placements_that_do_not_fit_gpu_memory_never_start(oracle, name):
    """A job whose model does not fit one GPU's memory (llama3-8b with AdamW on an A100-40GB) starts nowhere on
    a cluster of A100s, while a job that fits starts: the oracle's memory feasibility reaches every policy."""
    too_big = job("big", model="llama3-8b", batch_options=(8,), gpu_options=(1, 2, 4, 8), precision="bf16")
    fits = job("small", batch_options=(64,), gpu_options=(1,))
    s = snap((too_big, fits), nodes=(A100,))
    d = get_policy(name).decide(s, oracle)
    check_valid(s, d)
    started = {st.job_id for st in d.starts}
    assert "big" not in started
    assert "small" in started
