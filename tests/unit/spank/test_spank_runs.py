"""Runs of a requeued job: every run keeps its own step files and records (SLURM_RESTART_COUNT), a stale
job directory from an earlier job with the same ID is moved aside, and `easlurm sacct` shows each run's
energy, the job row's total (node 0 counted once) and the earlier runs' energy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_fakes import FakeClient, FakeProfiler, ctx, run_node
from agent_fakes import spool as spool

from easlurm.accounting.agent import restart_count
from easlurm.accounting.republish import _step_sort
from easlurm.accounting.sacct_rows import build_rows, job_total, run_numbers
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)


def test_each_run_has_its_own_step_files_and_records(spool: Path) -> None:
    """Run 1 of a requeued job writes `<step>+r1`, never into run 0's files; both reach AdminComment."""
    client = FakeClient()
    run_node(ctx(spool, nnodes=1, step="0"), client)
    again = run_node(ctx(spool, nnodes=1, step="0", restart=1), client)
    assert again is not None and again.run == 1 and again.key == "0+r1"
    assert (spool / "42" / "0" / "node-0.json").exists() and (spool / "42" / "0+r1" / "node-0.json").exists()
    published = decode_admin_comment(client.published[-1][2])
    assert sorted((s.step, s.run) for s in published) == [("0", 0), ("0", 1)]


def test_a_stale_job_directory_is_moved_aside_not_profiled_into(spool: Path) -> None:
    """This (run, step, node) already has a run directory: it is an earlier job's; the new job's
    records go to a fresh directory and no old step file is published as the new job's."""
    old = spool / "42" / "0" / "node-0"
    old.mkdir(parents=True, mode=0o750)
    (spool / "42").chmod(0o750)
    (spool / "42" / "0").chmod(0o750)
    (old / "run.json").write_text("{}\n")
    old_step = StepRecord(42, "5", 1, [node("a100-1", 300.0)])
    (spool / "42" / "step-5.json").write_text(json.dumps(old_step.to_dict()))
    client = FakeClient()
    run_node(ctx(spool, nnodes=1, step="0"), client)
    run_node(ctx(spool, nnodes=1, step="3"), client)
    stale = list(spool.glob("42.stale-*"))
    assert len(stale) == 1 and (stale[0] / "0" / "node-0" / "run.json").exists()
    assert FakeProfiler.instances[-2].kwargs["out_dir"] == spool / "42" / "0" / "node-0"
    assert sorted(s.step for s in decode_admin_comment(client.published[-1][2])) == ["0", "3"]


def test_restart_count_comes_from_slurmctld_when_the_environment_lacks_it() -> None:
    class Ctld:
        def __init__(self, value: Any) -> None:
            self.value = value

        def show_job(self, job_id: int) -> dict[str, str]:
            return {"JobId": str(job_id), "Restarts": self.value}

    assert restart_count(7, Ctld("2")) == 2
    assert restart_count(7, Ctld("x")) == 0


def node(host: str, gpu_w: float, dur: float = 10.0, node_id: int = 0) -> NodeRecord:
    return NodeRecord(
        node_id, host, 1.7e9, dur, [DeviceRecord("gpu0", "gpu", gpu_w * dur, gpu_w, 10, False, "nvml-energy")]
    )


def test_job_total_counts_the_batch_node_once() -> None:
    """The batch step holds node 0 (a100-1) for the whole job: step 0's a100-1 share is inside it, its
    a100-2 share is added. Without a batch record (srun-only), every step's nodes add up."""
    batch = StepRecord(7, "batch", 1, [node("a100-1", 400.0)])
    step0 = StepRecord(7, "0", 2, [node("a100-1", 300.0, 5.0), node("a100-2", 300.0, 5.0, 1)])
    total = job_total([batch, step0])
    assert total is not None and total.gpu_energy_j == 400.0 * 10 + 300.0 * 5
    assert total.duration_s == 10.0
    alone = job_total([step0])
    assert alone is not None and alone.gpu_energy_j == 2 * 300.0 * 5
    assert job_total([]) is None


def sacct_rows(comment: str) -> list[dict[str, str]]:
    rows = []
    for raw, state in (
        ("7", "REQUEUED"),
        ("7.batch", "CANCELLED"),
        ("7.0", "COMPLETED"),
        ("7", "COMPLETED"),
        ("7.batch", "COMPLETED"),
        ("7.0", "COMPLETED"),
    ):
        rows.append(
            {"JobIDRaw": raw, "JobID": raw, "State": state, "AdminComment": comment if "." not in raw else ""}
        )
    return rows


def test_sacct_shows_each_runs_energy_and_the_requeue_cost() -> None:
    steps = [
        StepRecord(7, "batch", 1, [node("a100-1", 200.0)]),
        StepRecord(7, "0", 1, [node("a100-1", 300.0, 5.0)]),
        StepRecord(7, "batch", 1, [node("a100-1", 220.0)], run=1),
        StepRecord(7, "0", 1, [node("a100-1", 330.0, 5.0)], run=1),
    ]
    rows = sacct_rows(encode_admin_comment(steps))
    assert run_numbers(rows) == [0, 0, 0, 1, 1, 1]
    every, _ = build_rows(rows, duplicates=True)
    assert [r["GPUEnergy"] for r in every] == [2000.0, 2000.0, 1500.0, 2200.0, 2200.0, 1650.0]
    assert every[1]["EnergyFlags"] == "ended:cancelled" and every[0]["EnergyFlags"] == "job-total"
    assert every[0]["RequeueEnergy"] is None and every[3]["RequeueEnergy"] == 2000.0
    last, _ = build_rows(rows, duplicates=False)
    assert [(r["JobID"], r["GPUEnergy"]) for r in last] == [
        ("7", 2200.0),
        ("7.batch", 2200.0),
        ("7.0", 1650.0),
    ]


def test_a_run_without_records_shows_none_of_another_runs() -> None:
    """Run 1 has not been profiled yet: its step 0 stays blank instead of showing run 0's energy."""
    rows = sacct_rows(encode_admin_comment([StepRecord(7, "0", 1, [node("a100-1", 300.0)])]))
    out, _ = build_rows(rows, duplicates=True)
    assert out[2]["GPUEnergy"] == 3000.0 and out[5].get("GPUEnergy") is None


def test_republish_orders_runs_then_steps() -> None:
    assert sorted(["batch+r1", "0+r1", "batch", "1", "0"], key=_step_sort) == [
        "0",
        "1",
        "batch",
        "0+r1",
        "batch+r1",
    ]


def test_a_batch_step_killed_by_the_requeue_is_flagged_even_when_sacct_says_failed() -> None:
    """The requeue's signal can leave the first run's batch script FAILED rather than CANCELLED: a later
    run exists, so that step still ended by the requeue; a step that completed is not flagged."""
    steps = [
        StepRecord(7, "batch", 1, [node("a100-1", 100.0)]),
        StepRecord(7, "0", 1, [node("a100-1", 300.0, 5.0)]),
        StepRecord(7, "batch", 1, [node("a100-1", 110.0)], run=1),
        StepRecord(7, "0", 1, [node("a100-1", 330.0, 5.0)], run=1),
    ]
    rows = sacct_rows(encode_admin_comment(steps))
    rows[1]["State"] = "FAILED"
    every, _ = build_rows(rows, duplicates=True)
    assert every[1]["EnergyFlags"] == "ended:requeued"
    assert "ended" not in every[2]["EnergyFlags"]  # the first run's step 0 completed before the requeue
    rows[4]["State"] = "FAILED"  # the last run's own failure is not a requeue
    every, _ = build_rows(rows, duplicates=True)
    assert "ended" not in every[4]["EnergyFlags"]
