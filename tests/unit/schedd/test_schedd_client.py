"""Parsers of the scheduler's Slurm commands, on output recorded from the local 22.05 cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.errors import SlurmError
from easlurm.slurm.client import parse_sacct_parsable
from easlurm.slurm.gres import gpus_of_gres
from easlurm.slurm.sched_client import (
    GPU_HISTORY_FIELDS,
    CliSchedClient,
    gpu_seconds_by_user,
    parse_sinfo_json,
    parse_sprio,
    parse_squeue_json,
)

FIX = Path(__file__).parents[2] / "fixtures" / "schedd"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:h100:2(IDX:0-1)", (2, "h100")),
        ("gres:gpu:2", (2, None)),
        ("gres/gpu:a100:2", (2, "a100")),  # 24.11's tres_per_node
        ("gres:gpu:h100", (1, "h100")),
        ("gpu:0", (0, None)),
        ("", (0, None)),
        ("tmpdisk:100,gpu:a100:8(S:0-1)", (8, "a100")),
    ],
)
def test_gres_forms_of_every_version(text: str, expected: tuple[int, str | None]) -> None:
    assert gpus_of_gres(text) == expected


def test_squeue_json_recorded_jobs() -> None:
    """Running jobs take GPU type/count from the allocation, pending ones from the request."""
    jobs = {j.job_id: j for j in parse_squeue_json((FIX / "squeue.json").read_text())}
    run = jobs["17"]
    assert run.running and run.gpu_type == "h100" and run.n_gpus == 2 and run.nodes == "h100-1"
    assert run.start_s is not None and run.start_s >= run.submit_s
    pend = jobs["19"]
    assert pend.pending and pend.reason == "BeginTime" and pend.eligible_s is not None
    assert pend.eligible_s > pend.submit_s  # submitted with --begin
    held = jobs["20"]
    assert held.priority == 0 and held.reason == "JobHeldUser" and held.gpu_type is None and held.n_gpus == 2
    assert held.comment == "user note"
    two_nodes = jobs["23"]
    assert two_nodes.node_count == 2 and two_nodes.n_gpus == 16


def test_sinfo_json_free_gpus() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "sinfo.json").read_text())}
    assert nodes["h100-1"].free_gpus == nodes["h100-1"].total_gpus - nodes["h100-1"].used_gpus
    assert nodes["h100-1"].used_gpus == 2 and nodes["a100-1"].used_gpus == 1
    assert nodes["cpu-1"].gpu_type is None and nodes["cpu-1"].free_gpus == 0
    assert "h100" in nodes["h100-2"].partitions and nodes["h100-2"].free_gpus == 8


def test_drained_node_has_no_free_gpus() -> None:
    text = (
        (FIX / "sinfo.json").read_text().replace('"state_flags": [\n      ]', '"state_flags": ["DRAIN"]', 1)
    )
    nodes = parse_sinfo_json(text)
    assert sum(1 for n in nodes if "DRAIN" in n.flags) == 1
    assert all(n.free_gpus == 0 for n in nodes if "DRAIN" in n.flags)


def test_sprio_and_bad_line() -> None:
    factors = parse_sprio((FIX / "sprio.txt").read_text())
    assert factors and all(len(v) == 2 for v in factors.values())
    assert parse_sprio("7 11000 10000\n") == {"7": (11000, 10000)}
    with pytest.raises(SlurmError):
        parse_sprio("JOBID PRIORITY SITE\n")


def test_gpu_seconds_by_user_counts_gpu_jobs_only() -> None:
    rows = parse_sacct_parsable((FIX / "sacct_gpu.txt").read_text(), GPU_HISTORY_FIELDS)
    expected = 0.0
    for r in rows:
        for item in r["AllocTRES"].split(","):
            if item.startswith("gres/gpu="):
                expected += int(item.split("=")[1]) * int(r["ElapsedRaw"])
    assert gpu_seconds_by_user(rows) == ({"root": expected} if expected else {})
    synthetic = [
        {"User": "a", "ElapsedRaw": "10", "AllocTRES": "cpu=1,gres/gpu=4"},
        {"User": "a", "ElapsedRaw": "5", "AllocTRES": "cpu=1"},
        {"User": "b", "ElapsedRaw": "3", "AllocTRES": "gres/gpu:h100=2,gres/gpu=2"},
    ]
    assert gpu_seconds_by_user(synthetic) == {"a": 40.0, "b": 6.0}


class RecordingClient(CliSchedClient):
    def __init__(self, out: str = "") -> None:
        super().__init__(env={})
        self.argv: list[list[str]] = []
        self.out = out

    def run(self, argv, retry=False):  # type: ignore[no-untyped-def]
        self.argv.append(list(argv))
        return self.out


def test_update_argv_and_refusals() -> None:
    c = RecordingClient()
    c.update_job("42", {"SiteFactor": "100", "StartTime": "now"})
    assert c.argv[-1] == ["scontrol", "update", "JobId=42", "SiteFactor=100", "StartTime=now"]
    with pytest.raises(SlurmError):
        c.update_job("42", {"UserId": "0"})
    with pytest.raises(SlurmError):
        c.update_job("42", {"AdminComment": "a|b"})
    c.requeue("42")
    assert c.argv[-1] == ["scontrol", "requeue", "42"]


def test_state_save_location_from_show_config() -> None:
    c = RecordingClient("SlurmctldPort = 6817\nStateSaveLocation       = /var/spool/slurmctld\n")
    assert c.state_save_location() == "/var/spool/slurmctld"
