"""GPU utilisation and memory in the step record and the job card: kept through the AdminComment (at
every detail level), read from records written before they existed, shown where measured and said
"not measured" where not."""

from __future__ import annotations

import json
import zlib

import pytest

from easlurm.accounting.admin_codec import PREFIX_V1
from easlurm.accounting.seff import GpuLimits, build_card, card_document
from easlurm.accounting.seff_cli import render_card
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)

H100 = {"h100": GpuLimits("h100-sxm", 700.0, 70.0)}
GB = 1_000_000_000


def gpu(name: str, util: float | None, peak_b: int | None, watts: float = 400.0) -> DeviceRecord:
    return DeviceRecord(
        name,
        "gpu",
        watts * 10,
        watts,
        10,
        source="nvml-energy",
        duration_s=10.0,
        peak_power_w=watts,
        mean_util_pct=util,
        peak_memory_bytes=peak_b,
        memory_total_bytes=None if peak_b is None else 80 * GB,
    )


def job() -> tuple[list[dict[str, str]], StepRecord]:
    devs = [gpu("gpu0", 91.5, 31 * GB), gpu("gpu1", 40.0, 12 * GB), gpu("gpu2", None, None, 90.0)]
    rec = StepRecord(5, "batch", 1, [NodeRecord(0, "h100-1", 1.7e9, 10.0, devs)], "gpu")
    rows = [
        {
            "JobIDRaw": jid,
            "JobID": jid,
            "JobName": "train",
            "State": "COMPLETED",
            "ElapsedRaw": "10",
            "NNodes": "1",
            "NodeList": "h100-1",
            "AllocTRES": "cpu=1,gres/gpu:h100=3,gres/gpu=3",
        }
        for jid in ("5", "5.batch")
    ]
    return rows, rec


def test_the_admin_comment_keeps_them_at_every_detail() -> None:
    _, rec = job()
    (back,) = decode_admin_comment(encode_admin_comment([rec]))
    assert [(d.mean_util_pct, d.peak_memory_bytes) for d in back.nodes[0].devices] == [
        (91.5, 31 * GB),
        (40.0, 12 * GB),
        (None, None),
    ]
    (node,) = rec.reduced("node").nodes
    (per_kind,) = node.devices
    assert per_kind.mean_util_pct == pytest.approx((91.5 + 40.0) / 2)  # the mean of the measured GPUs
    assert (per_kind.peak_memory_bytes, per_kind.memory_total_bytes) == (31 * GB, 80 * GB)  # the fullest GPU


def test_a_record_written_before_them_reads_as_not_measured() -> None:
    """An AdminComment of an older agent has no such keys: it decodes, and the card says not measured."""
    rows, rec = job()
    doc = {"v": 1, "steps": [rec.to_dict()], "dropped_steps": 0}
    for n in doc["steps"][0]["nodes"]:  # type: ignore[index]
        for d in n["devices"]:
            for key in ("mean_util_pct", "peak_memory_bytes", "memory_total_bytes"):
                del d[key]
    old = PREFIX_V1 + zlib.compress(json.dumps(doc).encode()).hex()  # as version 1 was written
    (back,) = decode_admin_comment(old)
    card = build_card(rows, [back], H100)
    assert all(d.mean_util_pct is None for d in card.steps[0].devices)
    assert "GPU utilisation and memory: not measured on gpu0@h100-1, gpu1@h100-1, gpu2@h100-1" in card.notes


def test_card_shows_utilisation_and_memory_where_measured() -> None:
    rows, rec = job()
    card = build_card(rows, [rec], H100)
    text = render_card(card, [], None, per_device=True)
    table = {ln.split()[2]: ln for ln in text.splitlines() if ln.startswith("batch")}
    assert "92%" in table["gpu0"] and "31.00GB/80.00GB" in table["gpu0"]  # 91.5 % rounds to 92 %
    assert "40%" in table["gpu1"] and "12.00GB/80.00GB" in table["gpu1"]
    assert "GPU utilisation and memory: not measured on gpu2@h100-1" in text
    grouped = render_card(card, [], None)
    (line,) = [ln for ln in grouped.splitlines() if ln.startswith("batch")]
    assert "66%" in line and "31.00GB/80.00GB" in line  # 3 GPUs in one row: mean util, fullest GPU
    devs = card_document(card)["steps"][0]["devices"]
    assert [(d["mean_util_pct"], d["peak_memory_bytes"], d["memory_total_bytes"]) for d in devs] == [
        (91.5, 31 * GB, 80 * GB),
        (40.0, 12 * GB, 80 * GB),
        (None, None, None),
    ]


def test_cpu_energy_shared_with_an_unknown_share_says_so_on_the_card() -> None:
    """A node's CPU package split by CPU time shows its share; one whose share could not be told keeps the
    whole energy and says `shared-unknown` (never a made-up `shared:0%`)."""
    rows, rec = job()
    pkg = DeviceRecord("package-0", "cpu", 600.0, 60.0, 10, source="rapl", duration_s=10.0)
    pkg.apportion(0.25, "cpu-time")
    dram = DeviceRecord("dram-0", "dram", 50.0, 5.0, 10, modelled=True, source="dram-model", duration_s=10.0)
    dram.apportioned = "shared-unknown"
    rec.nodes[0].devices.extend([pkg, dram])
    text = render_card(build_card(rows, [rec], H100), [], None, per_device=True)
    assert "shared:25%" in text and "shared-unknown" in text and "shared:0%" not in text
