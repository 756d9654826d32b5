"""Step records and their AdminComment encoding: totals, reduced detail, and survival of the paths a
value takes through Slurm (scontrol keeps it; sacctmgr lowercases and turns quotes into backticks)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from easlurm.accounting.step_record import (
    ADMIN_COMMENT_PREFIXES,
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    decode_admin_document,
    encode_admin_comment,
)
from easlurm.energy.result import DeviceEnergy, DeviceKind
from easlurm.errors import TraceError


def node(node_id: int, host: str, gpus: int = 2, gpu_w: float = 250.0, dur: float = 10.0) -> NodeRecord:
    devs = [
        DeviceRecord(f"gpu{i}", "gpu", gpu_w * dur, gpu_w, 100, False, "nvml-energy") for i in range(gpus)
    ]
    devs += [
        DeviceRecord("package-0", "cpu", 80.0 * dur, 80.0, 100, False, "rapl"),
        DeviceRecord("core-0", "cpu", 50.0 * dur, 50.0, 100, False, "rapl", in_total=False),
        DeviceRecord("dram-0", "dram", 5.0 * dur, 5.0, 100, True, "dram-model"),
    ]
    return NodeRecord(node_id, host, 1.7e9, dur, devs, 1.7e9 - 0.1, 1.7e9 + dur)


def step(job: int = 42, name: str = "0", nodes: int = 2, **kw: object) -> StepRecord:
    return StepRecord(job, name, nodes, [node(i, f"a100-{i + 1}", **kw) for i in range(nodes)], spec="all")  # type: ignore[arg-type]


def test_totals_sum_nodes_and_skip_sub_domains() -> None:
    s = step(nodes=2, gpus=4, dur=10.0)
    assert s.gpu_energy_j == pytest.approx(2 * 4 * 2500.0)
    assert s.cpu_energy_j == pytest.approx(2 * 800.0)  # core-0 is inside package-0
    assert s.dram_energy_j == pytest.approx(2 * 50.0)
    assert s.total_energy_j == pytest.approx(20000 + 1600 + 100)
    assert s.duration_s == pytest.approx(10.0)
    assert s.mean_power_w == pytest.approx(s.total_energy_j / 10.0)
    assert s.edp == pytest.approx(s.total_energy_j * 10.0)
    assert s.modelled_kinds == ["dram"]
    assert not s.partial


def test_missing_values_are_none_never_zero() -> None:
    n = NodeRecord(0, "h", None, None, [DeviceRecord("gpu0", "gpu", None, error="lost")])
    s = StepRecord(1, "batch", 1, [n])
    assert s.total_energy_j is None and s.gpu_energy_j is None and s.cpu_energy_j is None
    assert s.mean_power_w is None and s.edp is None and s.duration_s is None


def test_a_device_record_keeps_every_reading_of_the_profiled_device() -> None:
    """DeviceRecord is built from DeviceEnergy field by field name, so each reading keeps its name and
    type; a value JSON cannot carry (NaN, infinity) becomes None, unknown, and an enum its value."""
    kept = {f.name: f.type for f in dataclasses.fields(DeviceRecord)}
    assert {f.name: f.type for f in dataclasses.fields(DeviceEnergy)}.items() <= kept.items()
    dev = DeviceEnergy(
        "gpu0", DeviceKind.GPU, float("nan"), 250.0, 100, False, "nvml-energy", peak_power_w=300.0
    )
    dev.duration_s, dev.peak_memory_bytes = 10.0, 2**30
    rec = DeviceRecord.from_energy(dev)
    assert rec == DeviceRecord(
        "gpu0",
        "gpu",
        None,
        250.0,
        100,
        False,
        "nvml-energy",
        duration_s=10.0,
        peak_power_w=300.0,
        peak_memory_bytes=2**30,
    )
    assert type(rec.kind) is str and rec.apportioned is None


def test_partial_when_a_node_is_missing_or_failed() -> None:
    s = step(nodes=1)
    s.missing_nodes = [1]
    assert s.partial
    t = step(nodes=1)
    t.nodes[0].error = "profiler did not start"
    assert t.partial


def test_coverage_is_measured_over_wall_time() -> None:
    n = node(0, "x", dur=9.0)
    n.step_start_time, n.step_end_time = 100.0, 110.0
    assert n.coverage == pytest.approx(0.9)


def test_dict_round_trip_recomputes_totals() -> None:
    s = step(nodes=2)
    d = json.loads(json.dumps(s.to_dict()))
    d["total_energy_j"] = 1.0  # derived values in a document are never trusted
    back = StepRecord.from_dict(d)
    assert back.total_energy_j == pytest.approx(s.total_energy_j)
    assert back.to_dict() == s.to_dict()


def test_unsupported_schema_is_refused() -> None:
    d = step().to_dict()
    d["schema_version"] = 99
    with pytest.raises(TraceError, match="schema_version"):
        StepRecord.from_dict(d)


def test_reduced_detail_keeps_totals() -> None:
    s = step(nodes=3, gpus=8)
    for detail in ("node", "step"):
        r = s.reduced(detail)
        assert r.detail == detail
        for kind in ("gpu", "cpu", "dram", None):
            assert r.kind_energy_j(kind) == pytest.approx(s.kind_energy_j(kind))
        assert r.duration_s == pytest.approx(s.duration_s)
    assert len(s.reduced("step").nodes) == 1
    assert {d.name for d in s.reduced("node").nodes[0].devices} == {"gpu", "cpu", "dram"}


def test_admin_comment_is_lowercase_base32_ascii() -> None:
    """Version 2 is written: lowercase letters and digits after the prefix, nothing sacctmgr or sacct -P
    would change or split."""
    text = encode_admin_comment([step(), step(name="batch", nodes=1)])
    assert text.startswith("easlurm2:") and text.startswith(ADMIN_COMMENT_PREFIXES)
    assert set(text) <= set("abcdefghijklmnopqrstuvwxyz234567:") | set("easlurm2")


def test_admin_comment_survives_sacctmgr_and_surrounding_text() -> None:
    steps = [step(name=str(i)) for i in range(5)] + [step(name="batch", nodes=1)]
    text = encode_admin_comment(steps)
    mangled = ('Note: "checked" ' + text + " 'end'").lower().replace('"', "`").replace("'", "`")
    back = decode_admin_comment(mangled)
    assert sorted(s.step for s in back) == sorted(s.step for s in steps)
    for a in back:
        b = next(s for s in steps if s.step == a.step)
        assert a.to_dict() == b.to_dict()


def test_no_record_and_damaged_record() -> None:
    assert decode_admin_comment(None) == []
    assert decode_admin_comment("some admin note") == []
    text = encode_admin_comment([step()])
    with pytest.raises(TraceError, match="damaged"):
        decode_admin_comment(text[: len(text) // 2])  # e.g. truncated by the database column


def test_burst_of_steps_keeps_the_newest_in_full_detail_and_the_total_of_all() -> None:
    """200 profiled steps with 8 GPUs each: the newest ADMIN_COMMENT_MAX_STEPS keep full detail, the
    others are named as left out, and the run's total covers all 200."""
    steps = [step(name=str(i), nodes=1, gpus=8, gpu_w=200 + i) for i in range(200)]
    text = encode_admin_comment(steps)
    assert len(text) < 60_000
    doc = decode_admin_document(text)
    assert [s.step for s in doc.steps] == [str(i) for i in range(100, 200)]
    assert {s.detail for s in doc.steps} == {"device"}
    assert doc.omitted == [str(i) for i in range(100)]
    (total,) = doc.totals
    assert total.omitted == doc.omitted
    assert total.total_energy_j == pytest.approx(sum(s.total_energy_j or 0 for s in steps))


def test_cap_reduces_detail_then_drops_oldest_steps() -> None:
    rng = random.Random(3)
    steps = [
        StepRecord(
            7,
            str(i),
            4,
            [
                NodeRecord(
                    n,
                    f"node{n}",
                    1.0,
                    rng.uniform(1, 100),
                    [
                        DeviceRecord(f"gpu{g}", "gpu", rng.uniform(1, 1e6), rng.uniform(1, 700), 10)
                        for g in range(8)
                    ],
                )
                for n in range(4)
            ],
        )
        for i in range(60)
    ]
    full = encode_admin_comment(steps, max_chars=10**9)
    small = encode_admin_comment(steps, max_chars=len(full) // 3)
    assert len(small) <= len(full) // 3
    back = decode_admin_comment(small)
    assert back and back[0].detail in ("node", "step")
    by_step = {s.step: s for s in steps}
    for s in back:
        assert s.total_energy_j == pytest.approx(by_step[s.step].total_energy_j)
    tiny = encode_admin_comment(steps, max_chars=3000)
    kept = decode_admin_comment(tiny)
    assert len(tiny) <= 3000 and 0 < len(kept) < 60
    assert "59" in {s.step for s in kept}  # the newest steps are kept


def test_an_admin_comment_that_inflates_past_the_cap_is_refused_not_read() -> None:
    """A compressed record is inflated under a cap (easlurm.inputs.inflate): a few kB of hex that would
    inflate to hundreds of MB is a damaged record, not a memory spike."""
    import zlib

    from easlurm.accounting.admin_codec import PREFIX_V1
    from easlurm.accounting.step_record import decode_admin_comment
    from easlurm.errors import TraceError

    bomb = PREFIX_V1 + zlib.compress(b'{"v": 1, "steps": [], "pad": "' + b" " * 300_000_000, 9).hex()
    assert len(bomb) < 1_000_000
    with pytest.raises(
        TraceError, match="AdminComment: damaged easlurm record: compressed data inflates past"
    ):
        decode_admin_comment(bomb)
