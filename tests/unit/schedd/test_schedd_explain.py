"""A daemon that explains itself (issue 33): projected power against the budget, each job's predictions and
the reason in words for every rank, hold, release and preemption; a minimum run time before any
preemption; holds that do not flap; one log line per cycle."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from pathlib import Path

import pytest
from schedd_fake import FakeSchedClient, job, node

from easlurm.cli import main
from easlurm.model.oracle import Oracle
from easlurm.priority import holds, schedd_cli
from easlurm.priority.daemon import Daemon, DaemonConfig, cycle_log
from easlurm.priority.metrics import Metrics
from easlurm.priority.policies import get_policy
from easlurm.priority.rank_words import rank_view
from easlurm.priority.report import decision_rows, render_report
from easlurm.slurm.times import parse_timestamp_s

NOW = 1_800_000_000.0
SPEC = "energy-profile=model={m},steps=2000,batch=64:128,gpus={g}"


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


class SlurmLike(FakeSchedClient):
    """The fake, with Slurm's eligible time following a StartTime update (as squeue then reports it)."""

    def update_job(self, job_id: str, fields: dict[str, str]) -> None:  # type: ignore[override]
        super().update_job(job_id, fields)
        if "StartTime" in fields:
            j = self.get(job_id)
            at = self.now_s if fields["StartTime"] == "now" else parse_timestamp_s(fields["StartTime"])
            self.put(dataclasses.replace(j, eligible_s=at))


def make(client: FakeSchedClient, oracle: Oracle, tmp_path: Path, clock: list[float], **kw) -> Daemon:  # type: ignore[no-untyped-def]
    cfg = DaemonConfig(decision_log=tmp_path / "log.jsonl", env_dir=tmp_path / "env", hold_ttl_s=600.0, **kw)
    return Daemon(client, cfg, oracle=oracle, metrics=Metrics(), clock=lambda: clock[0])


def begin_queue() -> SlurmLike:
    """Two declared jobs submitted with `--begin` 60 s ahead, one declared job too big for the free GPUs,
    one running job: under a budget with room, nothing can start for a minute."""
    begin = NOW + 60.0
    jobs = [
        job("1", reason="BeginTime", eligible_s=begin, comment=SPEC.format(m="resnet50", g="1")),
        job("2", reason="BeginTime", eligible_s=begin, comment=SPEC.format(m="bert-base", g="1")),
        job("3", comment=SPEC.format(m="gpt2", g="8"), gpus_per_node=8),
        job("4", "RUNNING", nodes="h100-1", start_s=NOW - 3600, comment=SPEC.format(m="vit-b16", g="4")),
    ]
    return SlurmLike(jobs, [node("h100-1", "h100", used=4)], now_s=NOW)


def test_begin_time_holds_do_not_flap(oracle: Oracle, tmp_path: Path) -> None:
    """Jobs waiting for their own `--begin` are gated once under a budget and then left alone: six 5 s
    cycles of the same queue issue no scontrol update after the first (the old daemon held them on one
    cycle, released them on the next, every cycle until their begin time)."""
    client = begin_queue()
    clock = [NOW]
    d = make(client, oracle, tmp_path, clock, policy="charon", power_budget_w=4000.0)
    per_cycle = []
    for _ in range(6):
        before = len(client.calls)
        rep = d.cycle()
        assert rep.error is None
        per_cycle.append(len(client.calls) - before)
        clock[0] += 5.0
        client.now_s = clock[0]
    assert per_cycle[0] > 0 and per_cycle[1:] == [0] * 5, per_cycle
    for j in ("1", "2"):
        mark = holds.mark_of(client.get(j))
        assert mark is not None and mark.begin_s == int(NOW + 60.0) and mark.why == holds.WHY_BEGIN


def shed_queue(started_ago_s: float = 14.0) -> SlurmLike:
    """The issue's cluster: four 8-GPU H100 nodes, one 4-GPU job started `started_ago_s` ago, three jobs
    waiting (one urgent): under 2.5 kW the idle floor of the 28 free GPUs alone puts it over budget."""
    jobs = [
        job("11", "RUNNING", nodes="h100-1", start_s=NOW - started_ago_s, gpus_per_node=4, gpu_type="h100",
            comment=SPEC.format(m="gpt2", g="4")),
        job("12", submit_s=NOW - 600, comment=SPEC.format(m="resnet50", g="1:2")),
        job("13", submit_s=NOW - 300, comment=SPEC.format(m="bert-base", g="1:2") + ",urgent"),
        job("14", submit_s=NOW - 60, comment=SPEC.format(m="vit-b16", g="1:2")),
    ]  # fmt: skip
    nodes = [node("h100-1", "h100", used=4), *(node(f"h100-{i}", "h100") for i in (2, 3, 4))]
    return SlurmLike(jobs, nodes, now_s=NOW)


def test_a_shed_says_the_power_sum_and_waits_for_the_minimum_run_time(oracle: Oracle, tmp_path: Path) -> None:
    """Charon sheds the job that started 14 s ago because running + idle floor exceeds the budget: the
    report says so with the numbers, and the daemon does not requeue it within the minimum run time."""
    client = shed_queue()
    rep = make(client, oracle, tmp_path, [NOW], policy="charon", power_budget_w=2500.0).cycle()
    assert rep.decision is not None and rep.decision.preempt == ("11",)
    assert not [c for c in client.calls if c[0] == "requeue"]  # within sched.min_run_s (default 300 s)
    doc = json.loads(json.dumps(rep.to_dict(with_snapshot=False)))
    power = doc["power"]
    assert power["free_gpus"] == 28 and power["budget_w"] == 2500.0
    assert power["now_w"] == pytest.approx(power["running_w"] + power["idle_floor_w"])
    assert power["idle_floor_w"] == pytest.approx(28 * rep.snapshot.nodes[1].idle_power_w)  # type: ignore[union-attr]
    why = doc["jobs"]["11"]["why"]["spared"]
    assert f"idle floor {power['idle_floor_w']:.0f} W (28 free GPUs)" in why and "> budget 2500 W" in why
    assert "ran 14 s, under the minimum run time of 300 s" in why
    for j in ("12", "13", "14"):  # every waiting job: its placement, predictions and why it is held
        view = doc["jobs"][j]
        assert view["placement"] and view["power_w"] > 0 and view["energy_j"] > 0 and view["time_s"] > 0
        assert re.search(r"power budget: \d+ W now .* > budget 2500 W", view["why"]["hold"])


def test_the_minimum_run_time_is_a_setting(oracle: Oracle, tmp_path: Path) -> None:
    """With `min_run_s` 0 the same shed is applied, and a job that ran past the minimum is requeued."""
    for min_run_s, ago in ((0.0, 14.0), (300.0, 400.0)):
        client = shed_queue(started_ago_s=ago)
        d = make(client, oracle, tmp_path, [NOW], policy="charon", power_budget_w=2500.0, min_run_s=min_run_s)
        rep = d.cycle()
        assert [c[1] for c in client.calls if c[0] == "requeue"] == ["11"]
        assert (
            "power budget" in rep.jobs["11"].why["requeue"] and "idle floor" in rep.jobs["11"].why["requeue"]
        )


def test_bad_minimum_run_time_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    conf = tmp_path / "easlurm.yaml"
    conf.write_text("sched:\n  min_run_s: -5\n")
    assert main(["-c", str(conf), "schedd", "--once", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "min_run_s" in err and ">= 0" in err and len(err.splitlines()) == 1
    assert main(["schedd", "--min-run-time", "soon", "--once", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--min-run-time" in err and len(err.splitlines()) == 1


def test_zeus_fills_predictions_and_says_which_term_ranks(oracle: Oracle, tmp_path: Path) -> None:
    """Zeus with every GPU busy starts nothing: every waiting job still shows a placement, predicted power,
    energy and time, and its rank in words (predicted EDP and aging), the urgent one that Zeus does not
    rank by urgency."""
    client = shed_queue()
    client._nodes = [node(f"h100-{i}", "h100", used=8) for i in (1, 2, 3, 4)]
    rep = make(client, oracle, tmp_path, [NOW], policy="zeus").cycle()
    assert rep.decision is not None and not rep.decision.starts
    rows = {r["JobID"]: r for r in decision_rows(rep.to_dict(with_snapshot=False))}
    assert set(rows) == {"12", "13", "14"}
    for r in rows.values():
        assert r["Placement"].endswith(("xh100", "W")) and r["PredPower"].endswith("W")
        assert r["PredEnergy"].endswith("J") and re.fullmatch(r"\d+:\d\d:\d\d", r["PredTime"])
        assert re.search(r"rank \d of 3: predicted EDP .*J\*s / aging", r["Reason"])
        assert "queue order" not in r["Reason"]
    assert "urgent, but zeus does not rank by urgency" in rows["13"]["Reason"]
    second = next(r for r in rows.values() if "rank 2 of 3" in r["Reason"])
    assert re.search(r"behind job \d+ by its (predicted EDP|wait \(aging\))", second["Reason"])


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ("chronos", "urgent, deadline slack"),
        ("hades", "/ fairness (user GPU-s + 1 = "),
        ("themis", " s / fairness (user GPU-s + 1 = "),
        ("pollux", "less aging"),
    ],
)
def test_each_policy_names_its_score_terms(oracle: Oracle, tmp_path: Path, policy: str, words: str) -> None:
    client = shed_queue()
    client.put(dataclasses.replace(client.get("13"), comment=client.get("13").comment + ",deadline=2h"))
    client._nodes = [node(f"h100-{i}", "h100", used=8) for i in (1, 2, 3, 4)]
    rep = make(client, oracle, tmp_path, [NOW], policy=policy).cycle()
    scores = [v.score for v in rep.jobs.values() if v.rank is not None]
    assert len(scores) == 3 and any(words in s for s in scores), scores


def test_a_budget_under_one_job_above_the_idle_floor_is_warned_once(
    oracle: Oracle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """2.5 kW over 32 idle H100s leaves less than any waiting job adds: one warning line, in the report
    of every cycle, logged once; a budget with room warns nothing."""
    caplog.set_level(logging.WARNING, logger="easlurm.priority.daemon")
    d = make(shed_queue(), oracle, tmp_path, [NOW], policy="charon", power_budget_w=2500.0)
    reports = [d.cycle(), d.cycle()]
    for rep in reports:
        (warning,) = rep.warnings
        assert (
            "leaves" in warning
            and "above the idle floor" in warning
            and "less than one job's worth" in warning
        )
    logged_lines = [r for r in caplog.records if "less than one job's worth" in r.getMessage()]
    assert len(logged_lines) == 1
    assert (
        make(shed_queue(), oracle, tmp_path, [NOW], policy="charon", power_budget_w=20_000.0).cycle().warnings
        == []
    )
    assert "warning: power budget 2500 W leaves" in render_report(reports[0].to_dict(with_snapshot=False))


def test_loop_mode_logs_one_line_per_cycle(
    oracle: Oracle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each cycle of the loop: one INFO line with the jobs seen, the actions, the power against the budget
    and the cycle's time."""
    caplog.set_level(logging.INFO, logger="easlurm.priority.daemon.cycle")
    d = make(begin_queue(), oracle, tmp_path, [NOW], policy="charon", power_budget_w=4000.0, interval_s=0.001)
    assert d.run(threading.Event(), max_cycles=3) == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "easlurm.priority.daemon.cycle"]
    assert len(lines) == 3 and all(
        r.levelno == logging.INFO for r in caplog.records if r.name.endswith(".cycle")
    )
    assert re.match(r"cycle: 4 jobs seen, 1 the policy may start; actions: \d+ hold", lines[0])
    assert "actions: none" in lines[1] and "budget 4000 W" in lines[1]
    assert re.search(r"; power: running \d+ W \+ idle floor \d+ W \(4 free GPUs\) = \d+ W;", lines[1])
    assert re.search(r"took \d+\.\d\d s$", lines[2])


def test_loop_mode_shows_the_cycle_line_without_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    """`easlurm schedd` (no -v: WARNING) still shows the per-cycle INFO line in loop mode."""
    fake = begin_queue()
    monkeypatch.setattr("easlurm.slurm.sched_client.CliSchedClient", lambda **kw: fake)
    monkeypatch.setattr(schedd_cli.signal, "signal", lambda *a: None)  # keep pytest's own handlers
    monkeypatch.setattr(schedd_cli.cycle_log, "level", logging.NOTSET)
    seen: list[bool] = []
    monkeypatch.setattr(Daemon, "run", lambda self, stop: seen.append(cycle_log.isEnabledFor(logging.INFO)))
    assert main(["schedd", "--policy", "zeus", "--dry-run", "--decision-log", "/dev/null"]) == 0
    assert seen == [True]


def test_a_start_is_predicted_for_the_work_left_at_its_own_batch(oracle: Oracle, tmp_path: Path) -> None:
    """A job declared with batch 64:128 started at 128 needs half the steps: the start's predicted energy
    and time are those the policy ranked it by (they were twice that, steps counted at batch 64)."""
    client = shed_queue()
    rep = make(client, oracle, tmp_path, [NOW], policy="zeus").cycle()
    assert rep.decision is not None and rep.snapshot is not None
    ranked = rank_view(get_policy("zeus"), rep.snapshot, oracle)
    starts = [s for s in rep.decision.starts if s.batch != 64]
    assert starts
    for s in starts:
        view, pred = ranked.view(s.job_id), rep.predictions[s.job_id]
        assert view is not None and view.placement.startswith(f"{s.n_gpus}x{s.gpu_type}")
        assert pred.energy_j == pytest.approx(view.energy_j, rel=1e-6)
        assert pred.time_s == pytest.approx(view.time_s, rel=1e-6)


def test_aurachronos_chooses_victims_past_the_minimum_run_time(oracle: Oracle, tmp_path: Path) -> None:
    """AuraChronos spares jobs within its cooldown: the site's minimum run time raises it, so that the
    policy picks victims the daemon may preempt."""
    d = make(
        shed_queue(), oracle, tmp_path, [NOW], policy="aurachronos", preempt_cooldown_s=60.0, min_run_s=900.0
    )
    assert d.policy.preempt_cooldown_s == 900.0
    d = make(
        shed_queue(), oracle, tmp_path, [NOW], policy="aurachronos", preempt_cooldown_s=60.0, min_run_s=0.0
    )
    assert d.policy.preempt_cooldown_s == 60.0
