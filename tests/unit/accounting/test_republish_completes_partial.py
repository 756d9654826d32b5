"""`easlurm accounting republish` after a fault: the database holds a step as `partial` (node 0 published
before a node's record came; that node's own publication was killed, or slurmctld's copy overwrote its
database write), while the spool's step file has every node. The database must get the complete record:
a step already shown is not "up to date" while the spool knows more of it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from easlurm.accounting.republish import Republisher, Status
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)
from easlurm.errors import SlurmError
from easlurm.slurm.client import SlurmClient

T0 = 1_800_000_000.0


def node(node_id: int) -> NodeRecord:
    dev = DeviceRecord("gpu0", "gpu", 500.0, 100.0, samples=50, duration_s=5.0)
    return NodeRecord(
        node_id, f"a100-{node_id + 1}", T0, 5.0, [dev], step_start_time=T0, step_end_time=T0 + 5
    )


class ForgottenJob:
    """A job slurmctld has forgotten: the database's AdminComment only; writes go there."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.writes = 0

    def sacct_json(self, selection: Sequence[str]) -> dict[str, Any]:
        return {
            "jobs": [
                {
                    "job_id": 7,
                    "state": {"current": "COMPLETED"},
                    "comment": {"administrator": self.admin},
                    "time": {"start": int(T0), "end": int(T0 + 60), "submission": int(T0 - 5)},
                }
            ]
        }

    def show_job(self, job_id: int) -> dict[str, str]:
        raise SlurmError("slurm_load_jobs error: Invalid job id specified")

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        self.writes += 1
        self.admin = text.lower()


def test_a_partial_step_in_the_database_is_completed_from_the_spool(tmp_path: Path) -> None:
    partial = StepRecord(7, "0", 2, [node(0)], missing_nodes=[1])
    complete = StepRecord(7, "0", 2, [node(0), node(1)])
    batch = StepRecord(7, "batch", 1, [node(0)])
    (tmp_path / "7").mkdir()
    for rec in (complete, batch):
        (tmp_path / "7" / f"step-{rec.step}.json").write_text(json.dumps(rec.to_dict()))
    fake = ForgottenJob(encode_admin_comment([partial, batch]))
    [res] = Republisher(cast(SlurmClient, fake), tmp_path).run(["7"])
    assert res.status is Status.REPUBLISHED and res.missing == ["0"], res
    steps = {s.key: s for s in decode_admin_comment(fake.admin)}
    assert sorted(steps) == ["0", "batch"]  # once each
    assert steps["0"].missing_nodes == [] and [n.node_id for n in steps["0"].nodes] == [0, 1]
    [again] = Republisher(cast(SlurmClient, fake), tmp_path).run(["7"])
    assert again.status is Status.UP_TO_DATE and fake.writes == 1


def test_a_step_the_database_holds_complete_is_not_rewritten_from_a_partial_file(tmp_path: Path) -> None:
    complete = StepRecord(7, "0", 2, [node(0), node(1)])
    partial = StepRecord(7, "0", 2, [node(0)], missing_nodes=[1])
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "step-0.json").write_text(json.dumps(partial.to_dict()))
    fake = ForgottenJob(encode_admin_comment([complete]))
    [res] = Republisher(cast(SlurmClient, fake), tmp_path).run(["7"])
    assert res.status is Status.UP_TO_DATE and fake.writes == 0
