"""The daemon's verbs on the Slurm client compose scontrol's fields in slurm/ (one update each)."""

from __future__ import annotations

from test_schedd_client import RecordingClient

from easlurm.slurm.job_updates import Hold, Placement, Release
from easlurm.slurm.times import format_timestamp


def test_verbs_compose_one_scontrol_update_each() -> None:
    c = RecordingClient()
    c.place(
        "7",
        Placement(num_nodes=1, gres_name="gpu", gres_count=2, gres_type="h100", like_request="gres/gpu:1"),
    )
    assert c.argv[-1] == ["scontrol", "update", "JobId=7", "NumNodes=1", "TresPerNode=gres/gpu:h100:2"]
    c.place("7", Placement(gres_name="shard", gres_count=2, nodes=("h100-1",), partition="h100"))
    assert c.argv[-1][3:] == ["TresPerNode=gres:shard:2", "NodeList=h100-1", "Partition=h100"]
    c.order("7", 100)
    assert c.argv[-1][3:] == ["SiteFactor=100"]
    c.hold("7", 1_800_000_000, "easlurm-hold:until=1800000000,begin=0")
    assert c.argv[-1][3:] == [
        f"StartTime={format_timestamp(1_800_000_000)}",
        "AdminComment=easlurm-hold:until=1800000000,begin=0",
    ]
    c.release("7")
    assert c.argv[-1][3:] == ["StartTime=now", "AdminComment="]


def test_changes_read_as_their_fields() -> None:
    """What the decision log shows: a change is the mapping of its scontrol fields; empty is falsy."""
    assert Placement() == {} and not Placement()
    assert dict(Release(1_800_000_000)) == {"StartTime": format_timestamp(1_800_000_000), "AdminComment": ""}
    assert Hold(5, "m")["AdminComment"] == "m"
