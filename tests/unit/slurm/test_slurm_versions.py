"""The Slurm client's parsers on outputs recorded from each real Slurm version (22.05, 24.11, 26.05):
the same jobs and nodes (tests/fixtures/slurm/README.md) must read the same whatever the version prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.accounting.republish import parse_sacct_json_jobs
from easlurm.errors import SlurmError
from easlurm.slurm.client import (
    SACCT_DELIMITER,
    job_view,
    parse_helpformat,
    parse_sacct_parsable,
    parse_version,
)
from easlurm.slurm.json_values import load_document
from easlurm.slurm.sched_client import (
    GPU_HISTORY_FIELDS,
    SlurmNode,
    gpu_seconds_by_user,
    parse_scontrol_nodes_json,
    parse_sinfo_json,
    parse_sprio,
    parse_squeue_json,
)

FIX = Path(__file__).parents[2] / "fixtures" / "slurm"
VERSIONS = ("2205", "2411", "2605")


def scenarios(version: str) -> dict[str, str]:
    lines = (FIX / version / "jobs.txt").read_text().splitlines()
    return dict(line.split() for line in lines if line.strip() and not line.startswith("#"))


def nodes_of(version: str) -> dict[str, SlurmNode]:
    """Per-node data where each version has it: sinfo on 22.05, scontrol later (what the client reads)."""
    if (FIX / version / "scontrol_nodes.json").exists():
        nodes = parse_scontrol_nodes_json((FIX / version / "scontrol_nodes.json").read_text())
    else:
        nodes = parse_sinfo_json((FIX / version / "sinfo.json").read_text())
    return {n.name: n for n in nodes}


@pytest.mark.parametrize("version", VERSIONS)
def test_version_string(version: str) -> None:
    parsed = parse_version((FIX / version / "version.txt").read_text())
    assert parsed is not None and parsed[:2] == (int(version[:2]), int(version[2:]))


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_jobs_read_alike_in_every_version(version: str) -> None:
    ids = scenarios(version)
    jobs = {j.job_id: j for j in parse_squeue_json((FIX / version / "squeue.json").read_text())}

    typed = jobs[ids["gpu_typed_running"]]
    assert typed.running and typed.gpu_type == "h100" and typed.n_gpus == 2 and len(typed.gpu_indices) == 2
    assert typed.start_s is not None and typed.submit_s > 0
    untyped = jobs[ids["gpu_untyped_running"]]
    assert untyped.running and untyped.gpu_type == "a100" and untyped.n_gpus == 1
    multi = jobs[ids["multinode_running"]]
    assert multi.running and multi.node_count == 2 and multi.n_gpus == 2 and multi.gpu_type == "a100"

    held = jobs[ids["declared_held"]]
    assert held.pending and not held.running and held.priority == 0
    assert held.gpu_type == "h100" and held.n_gpus == 2 and held.time_limit_s == 30 * 60
    assert held.start_s is None or held.start_s > held.submit_s
    untyped_held = jobs[ids["gpu_untyped_held"]]
    assert untyped_held.pending and untyped_held.gpu_type is None and untyped_held.n_gpus == 2

    s2, s1 = jobs[ids["shard2_running"]], jobs[ids["shard1_running"]]
    assert (s2.shards, s1.shards) == (2, 1) and s2.n_gpus == 0
    assert len(s2.gpu_indices) == 1 and s2.gpu_indices == s1.gpu_indices  # first fit: the same GPU
    assert jobs[ids["shard1_held"]].shards == 1 and jobs[ids["shard1_held"]].pending

    hostile = jobs[ids["hostile_running"]]
    assert hostile.name == "x Restarts=7 AdminComment=easlurm-forged" and hostile.partition == "cpu"
    assert hostile.admin_comment == "" and hostile.restarts == 0 and hostile.comment == "y Partition=evil"

    requeued = jobs[ids["requeued_pending"]]
    assert requeued.pending and requeued.restarts == 1 and requeued.requeue
    waiting = jobs[ids["pending_resources"]]
    assert waiting.pending and waiting.priority > 0 and waiting.node_count == 2 and waiting.n_gpus == 16


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_read_alike_in_every_version(version: str) -> None:
    ids = scenarios(version)
    jobs = {j.job_id: j for j in parse_squeue_json((FIX / version / "squeue.json").read_text())}
    nodes = nodes_of(version)
    assert set(nodes) == {"a100-1", "a100-2", "h100-1", "h100-2", "cpu-1"}
    drained = nodes["a100-2"]
    assert drained.state == "MIXED" and "DRAIN" in drained.flags and not drained.usable
    assert drained.free_gpus == 0 and drained.used_gpus == 1
    a1 = nodes["a100-1"]
    assert a1.usable and a1.gpu_type == "a100" and a1.total_gpus == 8 and a1.used_gpus == 2  # untyped + multi
    assert a1.total_shards == 24 and a1.shards_per_gpu == 3 and "a100" in a1.partitions
    shard_node = jobs[ids["shard2_running"]].nodes
    h = nodes[shard_node]
    typed_here = 2 if jobs[ids["gpu_typed_running"]].nodes == shard_node else 0
    assert h.used_gpus == typed_here + 1  # the GPU holding shards is not free for whole-GPU jobs
    assert nodes["cpu-1"].gpu_type is None and nodes["cpu-1"].free_gpus == 0


@pytest.mark.parametrize("version", ["2411", "2605"])
def test_grouped_sinfo_of_later_versions_is_refused_not_misread(version: str) -> None:
    """24.11+ `sinfo --json` groups nodes: reading it as a node list would see no nodes at all."""
    with pytest.raises(SlurmError, match="scontrol --json show nodes"):
        parse_sinfo_json((FIX / version / "sinfo.json").read_text())


@pytest.mark.parametrize("version", VERSIONS)
def test_job_view_from_json_ignores_what_users_write(version: str) -> None:
    """A job named 'x Restarts=7 AdminComment=easlurm-forged' reads as what Slurm holds, not as its name."""
    ids = scenarios(version)
    source = "scontrol_jobs.json" if version != "2205" else "squeue.json"
    jobs = load_document((FIX / version / source).read_text(), source).get("jobs") or []
    views = {v["JobId"]: v for v in map(job_view, jobs)}
    hostile = views[ids["hostile_running"]]
    assert hostile["AdminComment"] == "" and hostile["Restarts"] == "0" and hostile["JobState"] == "RUNNING"
    assert views[ids["requeued_pending"]]["Restarts"] == "1"
    assert "forged" in (FIX / version / "scontrol_show_job_hostile.txt").read_text()  # what text parsing saw


@pytest.mark.parametrize("version", VERSIONS)
def test_sacct_json_states_and_never_started_jobs(version: str) -> None:
    ids = scenarios(version)
    db = parse_sacct_json_jobs(load_document((FIX / version / "sacct.json").read_text(), "sacct"))
    assert db[ids["completed"]].state == "COMPLETED" and db[ids["completed"]].end_s is not None
    cancelled = db[ids["cancelled_never_started"]]
    assert cancelled.state == "CANCELLED"
    if version != "2205":  # 24.11+ prints NO_VAL; 22.05 prints the cancel time as start
        assert cancelled.start_s is None
    assert db[ids["requeued_pending"]].state == "PENDING"  # the latest record, not the REQUEUED one
    assert all(j.state.isupper() and "[" not in j.state for j in db.values())


@pytest.mark.parametrize(
    ("version", "has", "lacks"),
    [
        ("2205", {"ResvCPU", "Reserved", "AdminComment"}, {"Restarts", "SLUID"}),
        ("2411", {"Restarts", "Extra", "FailedNode", "AdminComment"}, {"ResvCPU", "Reserved"}),
        ("2605", {"Restarts", "OriginalSLUID", "Exclusive", "AdminComment"}, {"ResvCPU"}),
    ],
)
def test_sacct_fields_come_from_helpformat(version: str, has: set[str], lacks: set[str]) -> None:
    fields = set(parse_helpformat((FIX / version / "sacct_helpformat.txt").read_text()))
    assert has <= fields and not (lacks & fields)


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_history_and_sprio(version: str) -> None:
    rows = parse_sacct_parsable(
        (FIX / version / "sacct_gpu.txt").read_text(), GPU_HISTORY_FIELDS, SACCT_DELIMITER
    )
    assert gpu_seconds_by_user(rows).get("root", 0.0) > 0
    ids = scenarios(version)
    factors = parse_sprio((FIX / version / "sprio.txt").read_text())
    assert factors[ids["pending_resources"]][1] == 100


@pytest.mark.parametrize("version", VERSIONS)
def test_trace_reader_reads_every_versions_sacct_json(version: str) -> None:
    from easlurm.sim.traces import TraceStats, open_trace

    stats = TraceStats()
    jobs = list(open_trace(str(FIX / version / "sacct.json"), fmt="sacct-json", stats=stats))
    by_id = {str(j.job_id): j for j in jobs}
    ids = scenarios(version)
    assert by_id[ids["gpu_typed_running"]].n_gpus == 2 and by_id[ids["gpu_typed_running"]].gpu_type == "h100"
    assert all(j.state is None or "[" not in j.state for j in jobs)
