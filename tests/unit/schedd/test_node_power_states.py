"""Slurm's power saving flags (sinfo's `idle~`, `idle%`, `idle#`) become the snapshot's node power state.

The recorded outputs (tests/fixtures/slurm) were captured without power saving, so no node there carries
a power flag: these tests add Slurm's flag words to a recorded node in each version's own form
(22.05: `state_flags`; 24.11 and later: the `state` list). A capture on a box running power saving is
still to be recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easlurm.slurm.sched_client import parse_scontrol_nodes_json, parse_sinfo_json

FIX = Path(__file__).parents[2] / "fixtures" / "slurm"
CASES = [
    ("POWERED_DOWN", "off"),
    ("POWERING_DOWN", "powering_down"),
    ("POWERING_UP", "powering_up"),
    ("POWER_DOWN", "on"),
]


def test_recorded_nodes_are_on_with_their_last_busy_time() -> None:
    for version, name, parse in (
        ("2205", "sinfo.json", parse_sinfo_json),
        ("2411", "scontrol_nodes.json", parse_scontrol_nodes_json),
        ("2605", "scontrol_nodes.json", parse_scontrol_nodes_json),
    ):
        nodes = parse((FIX / version / name).read_text())
        assert nodes and all(n.power_state == "on" for n in nodes), version
        assert all(n.last_busy_s is not None and n.last_busy_s > 1.5e9 for n in nodes), version


@pytest.mark.parametrize(("flag", "state"), CASES)
def test_2205_state_flags(flag: str, state: str) -> None:
    doc = json.loads((FIX / "2205" / "sinfo.json").read_text())
    doc["nodes"][0]["state"] = "idle"
    doc["nodes"][0]["state_flags"] = [flag]
    node = parse_sinfo_json(json.dumps(doc))[0]
    assert node.power_state == state and node.state == "IDLE"


@pytest.mark.parametrize("version", ["2411", "2605"])
@pytest.mark.parametrize(("flag", "state"), CASES)
def test_state_list_flags(version: str, flag: str, state: str) -> None:
    doc = json.loads((FIX / version / "scontrol_nodes.json").read_text())
    doc["nodes"][0]["state"] = ["IDLE", flag]
    node = parse_scontrol_nodes_json(json.dumps(doc))[0]
    assert node.power_state == state and node.usable
