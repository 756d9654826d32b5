"""The GPU power limit a step ran at is kept in its record (through the AdminComment, at every detail
level) and shown by `easlurm sacct` as PowerLimit / PowerLimitRaw; a limit that could not be set is flagged."""

from __future__ import annotations

import json

from easlurm.accounting.sacct_rows import build_rows, format_cell, render_json
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)


def node(i: int, requested: float | None, applied: float | None, error: str | None = None) -> NodeRecord:
    dev = DeviceRecord(f"gpu{i}", "gpu", 1000.0, 250.0, 40, False, "nvml-energy")
    return NodeRecord(i, f"h100-{i}", 1.7e9, 4.0, [dev], None, None, None, [], requested, applied, error)


def rows_of(rec: StepRecord) -> list[dict[str, object]]:
    rows, _ = build_rows(
        [
            {"JobIDRaw": "9", "JobID": "9", "AdminComment": encode_admin_comment([rec]), "NNodes": "2"},
            {"JobIDRaw": "9.0", "JobID": "9.0", "AdminComment": "", "NNodes": "2"},
        ]
    )
    return rows


def test_the_limit_in_force_survives_the_admin_comment_and_fills_the_column() -> None:
    rec = StepRecord(9, "0", 2, [node(0, 455.0, 455.0), node(1, 455.0, 455.0)])
    for detail in ("device", "node", "step"):
        (back,) = decode_admin_comment(encode_admin_comment([rec.reduced(detail)]))
        assert back.power_limit_w == 455.0 and back.power_limit_unset_w is None
    step = next(r for r in rows_of(rec) if r["JobID"] == "9.0")
    assert step["PowerLimit"] == 455.0 and step["EnergyFlags"] == ""
    assert (format_cell("PowerLimit", 455.0), format_cell("PowerLimitRaw", 455.0)) == ("455.0W", "455")
    doc = json.loads(render_json(["JobID", "PowerLimit", "PowerLimitRaw"], [step]))
    assert doc["rows"][0]["power_limit_w"] == 455.0 and "power_limit_w_raw" not in doc["rows"][0]


def test_a_limit_not_set_on_one_node_leaves_the_column_empty_and_flags_it() -> None:
    rec = StepRecord(9, "0", 2, [node(0, 455.0, 455.0), node(1, 455.0, None, "GPU 0: 455000 mW not set")])
    assert rec.power_limit_w is None and rec.power_limit_unset_w == 455.0
    step = next(r for r in rows_of(rec) if r["JobID"] == "9.0")
    assert step["PowerLimit"] is None
    assert "limit-unset:455W" in str(step["EnergyFlags"])
    (back,) = decode_admin_comment(encode_admin_comment([rec.reduced("step")]))
    assert back.power_limit_unset_w == 455.0 and "not set" in (back.nodes[0].limit_error or "")


def test_a_step_at_the_default_limit_has_an_empty_column() -> None:
    rec = StepRecord(9, "0", 2, [node(0, None, None), node(1, None, None)])
    step = next(r for r in rows_of(rec) if r["JobID"] == "9.0")
    assert step["PowerLimit"] is None and "limit-unset" not in str(step["EnergyFlags"])
