"""The lead-in between a step's start and the profiler's first sample: covered from NVML's driver power
buffer where it reaches back, extrapolated at the first measured power where it does not (and for sensors
without history), never beyond LEAD_IN_MAX_S; records written before it still read (the share watcher's
split over the lead-in: test_energy_gpu_share)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from easlurm_fakes.powercap import FakePowercap

from easlurm.accounting.agent import NodeAgent, StepContext
from easlurm.accounting.seff import lead_in_notes
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)
from easlurm.energy import EnergyProfiler
from easlurm.energy.lead_in import LEAD_IN_MAX_S, cover_lead_in, lead_in_s

FAKE_NVML = "easlurm_fakes.fake_nvml"


def _grid(t0: float, t1: float, w: float, step: float = 0.1) -> list[tuple[float, float]]:
    n = round((t1 - t0) / step)
    return [(t0 + i * step, w) for i in range(n + 1)]


def test_a_buffer_that_reaches_back_covers_the_lead_in_alone() -> None:
    """400 W until 1001 s, 100 W after: the buffer's samples, interpolated at the step's start, not the
    first measured power (which would say 50 W)."""
    history = _grid(995.0, 1001.0, 400.0) + _grid(1001.1, 1002.0, 100.0)
    lead = cover_lead_in(history, since=1000.05, until=1002.0, first_power_w=50.0)
    assert lead is not None and lead.extrapolated_s == 0.0
    assert lead.buffered_s == pytest.approx(1.95)
    # 0.95 s at 400 W, the ramp 1001.0 -> 1001.1 (25 J), 0.9 s at 100 W
    assert lead.energy_j == pytest.approx(0.95 * 400 + 25.0 + 0.9 * 100)
    assert lead.peak_power_w == 400.0


def test_a_buffer_too_short_is_extrapolated_before_its_oldest_sample() -> None:
    history = _grid(1001.5, 1002.0, 200.0)
    lead = cover_lead_in(history, since=1000.0, until=1002.0, first_power_w=50.0)
    assert lead is not None
    assert lead.buffered_s == pytest.approx(0.5) and lead.extrapolated_s == pytest.approx(1.5)
    assert lead.energy_j == pytest.approx(2.0 * 200.0)  # the oldest sample's power held back to the start


def test_a_stale_buffer_holds_its_last_power_briefly_then_extrapolates() -> None:
    history = _grid(999.0, 1000.5, 300.0)
    lead = cover_lead_in(history, since=1000.0, until=1003.0, first_power_w=100.0, hold_s=0.5)
    assert lead is not None
    assert lead.buffered_s == pytest.approx(1.0) and lead.extrapolated_s == pytest.approx(2.0)
    assert lead.energy_j == pytest.approx(1.0 * 300.0 + 2.0 * 100.0)


def test_without_history_the_first_measured_power_is_extrapolated() -> None:
    lead = cover_lead_in([], since=1000.0, until=1000.8, first_power_w=60.0)
    assert lead is not None and lead.buffered_s == 0.0
    assert lead.extrapolated_s == pytest.approx(0.8) and lead.energy_j == pytest.approx(48.0)
    assert cover_lead_in([], since=1000.0, until=1000.8, first_power_w=None) is None


def test_the_lead_in_is_bounded() -> None:
    assert lead_in_s(1000.0, 1000.0 + LEAD_IN_MAX_S) == pytest.approx(LEAD_IN_MAX_S)
    assert lead_in_s(1000.0, 1000.0 + LEAD_IN_MAX_S + 0.1) is None  # the agent really started late
    assert lead_in_s(1000.0, 999.0) is None  # the profiler started before the work: nothing to cover
    assert lead_in_s(None, 1000.0) is None


# ------------------------------------------------------------------------------ the profiler, live fakes


def _profile(lead_s: float, run_s: float = 0.3) -> tuple[EnergyProfiler, float]:
    """Profile the fake GPU for `run_s`, the work having begun `lead_s` before."""
    since = time.time() - lead_s
    with EnergyProfiler(devices="gpu", interval_s=0.05, nvml_module=FAKE_NVML, lead_in_from=since) as prof:
        time.sleep(run_s)
    return prof, since


def test_the_profiler_reaches_back_through_the_driver_buffer(nvml_env: pytest.MonkeyPatch) -> None:
    """The GPU drew 400 W during the step's first second, 100 W since: the record bills both, the
    window starts at the step's start."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "100")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_BEFORE", f"400@{time.time() - 0.5}")
    prof, since = _profile(1.5)
    r = prof.result
    assert r is not None and r.start_time == since
    dev = r.devices[0]
    assert dev.error is None and dev.duration_s is not None and dev.energy_j is not None
    assert dev.lead_in_extrapolated_s == 0.0
    assert dev.lead_in_buffered_s == pytest.approx(1.5, abs=0.05)
    assert dev.duration_s == pytest.approx(r.duration_s, abs=0.05)
    # 1.0 s at 400 W (one driver period of it ramps down), the rest at 100 W
    assert dev.energy_j == pytest.approx(400.0 * 1.0 + 100.0 * (dev.duration_s - 1.0), abs=20.0)


def test_regions_keep_their_place_in_the_longer_window(nvml_env: pytest.MonkeyPatch) -> None:
    """A region's times count from the result's start, which the lead-in moved back; its energy is its
    own (between its probes), not the lead-in's."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "100")
    since = time.time() - 1.0
    with EnergyProfiler(devices="gpu", interval_s=0.02, nvml_module=FAKE_NVML, lead_in_from=since) as prof:
        time.sleep(0.1)
        with prof.region("work"):
            time.sleep(0.3)
    r = prof.result
    assert r is not None
    (region,) = r.regions
    assert region.start_s == pytest.approx(1.1, abs=0.05) and region.duration_s == pytest.approx(
        0.3, abs=0.05
    )
    assert region.energy_j["gpu0"] == pytest.approx(100.0 * region.duration_s, rel=0.05)  # type: ignore[operator]


def test_a_short_driver_buffer_is_extrapolated_beyond_it(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "250")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_BUFFER", "5")  # 0.5 s of 100 ms samples
    prof, _ = _profile(2.0)
    dev = prof.result.devices[0]  # type: ignore[union-attr]
    assert dev.lead_in_buffered_s is not None and dev.lead_in_extrapolated_s is not None
    assert 0.4 <= dev.lead_in_buffered_s <= 0.7
    assert dev.lead_in_buffered_s + dev.lead_in_extrapolated_s == pytest.approx(2.0, abs=0.05)
    assert dev.energy_j == pytest.approx(250.0 * dev.duration_s, rel=1e-2)  # type: ignore[operator]


def test_a_gpu_without_buffer_extrapolates_its_first_power(nvml_env: pytest.MonkeyPatch) -> None:
    """No driver samples: the 400 W the GPU drew before its first sample is not known, the 100 W of the
    first measured interval is extrapolated, and the record says so."""
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_SAMPLES", "all")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "100")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_BEFORE", f"400@{time.time() - 0.2}")
    prof, _ = _profile(1.0)
    dev = prof.result.devices[0]  # type: ignore[union-attr]
    assert dev.lead_in_buffered_s == 0.0 and dev.lead_in_extrapolated_s == pytest.approx(1.0, abs=0.05)
    assert dev.energy_j == pytest.approx(100.0 * dev.duration_s, rel=1e-2)  # type: ignore[operator]


def test_a_lead_in_over_the_bound_is_not_covered(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "100")
    prof, since = _profile(LEAD_IN_MAX_S + 5.0)
    r = prof.result
    assert r is not None and r.start_time > since + LEAD_IN_MAX_S and r.duration_s < 1.0
    dev = r.devices[0]
    assert dev.lead_in_buffered_s is None and dev.lead_in_extrapolated_s is None
    assert dev.energy_j == pytest.approx(100.0 * dev.duration_s, rel=1e-2)  # type: ignore[operator]


def test_rapl_counters_extrapolate_the_first_interval(powercap: FakePowercap) -> None:
    """No history: the lead-in up to the counter's first reading at its first interval's power."""
    powercap.start_ticker({"package-0": 80.0, "package-1": 80.0})
    try:
        since = time.time() - 0.6
        with EnergyProfiler(
            devices="cpu", interval_s=0.05, powercap_root=powercap.root, lead_in_from=since
        ) as prof:
            time.sleep(0.4)
    finally:
        powercap.stop_ticker()
    r = prof.result
    assert r is not None and r.start_time == since
    pkg = r.device("package-0")
    assert pkg.lead_in_buffered_s == 0.0 and pkg.lead_in_extrapolated_s is not None
    assert 0.6 <= pkg.lead_in_extrapolated_s <= 0.6 + r.duration_s - 0.4  # to the first reading
    assert pkg.duration_s == pytest.approx(r.duration_s, abs=0.1)
    assert pkg.energy_j == pytest.approx(80.0 * pkg.duration_s, rel=0.1)  # type: ignore[operator]


def test_the_agents_node_record_covers_its_step_from_the_start(
    nvml_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The node agent hands the step's start to its profiler: the record starts there and covers the
    step's wall time (coverage 1), its GPU's energy the fake's power over all of it."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "200")
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    start = time.time() - 0.8
    ctx = StepContext(
        job_id=42, step="0", nnodes=1, node_id=0, spool=spool, gid=os.getgid(), spec="gpu", gpus=["0"],
        step_start_time=start,
    )  # fmt: skip
    agent = NodeAgent(
        ctx, profiler_settings={"nvml_module": FAKE_NVML, "sample_log": False, "interval_s": 0.05}
    )
    agent.start()
    time.sleep(0.3)
    agent.request_stop(time.time())
    step = agent.finish()
    assert step is not None and not step.partial
    (node,) = step.nodes
    assert node.start_time == start and node.coverage == pytest.approx(1.0, abs=0.01)
    (gpu,) = node.devices
    assert gpu.lead_in_buffered_s == pytest.approx(0.8, abs=0.05) and gpu.lead_in_extrapolated_s == 0.0
    assert gpu.duration_s == pytest.approx(node.duration_s, abs=0.05)
    assert gpu.energy_j == pytest.approx(200.0 * gpu.duration_s, rel=0.01)  # type: ignore[operator]
    assert StepRecord.from_dict(json.loads(ctx.step_file.read_text())).nodes[0].devices[0] == gpu


# ------------------------------------------------------------------------------------------- records


def _step(devices: list[DeviceRecord], start: float, end: float, duration: float) -> StepRecord:
    node = NodeRecord(0, "n1", start, duration, devices, step_start_time=start, step_end_time=end)
    return StepRecord(5, "0", 1, [node], "gpu")


def test_records_carry_the_lead_in_and_old_records_still_read() -> None:
    gpu = DeviceRecord("gpu0", "gpu", 1000.0, 100.0, 10, lead_in_buffered_s=0.6, lead_in_extrapolated_s=0.02)
    cpu = DeviceRecord(
        "package-0", "cpu", 500.0, 50.0, 10, lead_in_buffered_s=0.0, lead_in_extrapolated_s=0.62
    )
    step = _step([gpu, cpu], 1000.0, 1010.0, 10.0)
    back = decode_admin_comment(encode_admin_comment([step]))[0]
    assert back.nodes[0].devices[0].lead_in_buffered_s == 0.6
    assert back.nodes[0].devices[1].lead_in_extrapolated_s == 0.62
    assert back.lead_in_by_kind == {"gpu": (0.6, 0.02), "cpu": (0.0, 0.62)}
    assert step.reduced("node").nodes[0].devices[0].lead_in_buffered_s == 0.6  # kept per kind
    old = {"name": "gpu0", "kind": "gpu", "energy_j": 5.0, "samples": 3}  # written before the lead-in
    dev = DeviceRecord.from_dict(old)
    assert dev.lead_in_buffered_s is None and dev.lead_in_extrapolated_s is None
    assert StepRecord.from_dict(_step([dev], 0.0, 1.0, 1.0).to_dict()).lead_in_by_kind == {}


def test_seff_notes_a_noticeable_lead_in_and_a_late_start() -> None:
    gpu = DeviceRecord("gpu0", "gpu", 1000.0, 100.0, 10, lead_in_buffered_s=0.6, lead_in_extrapolated_s=0.02)
    notes = lead_in_notes(_step([gpu], 1000.0, 1010.0, 10.0))
    assert notes == [
        "lead-in: step 0: its first 0.62 s, before its agents' first samples, are in the totals: "
        "gpu 0.60 s from the driver's power samples, 0.02 s extrapolated"
    ]
    cpu = DeviceRecord(
        "package-0", "cpu", 500.0, 50.0, 10, lead_in_buffered_s=0.0, lead_in_extrapolated_s=0.62
    )
    whole = DeviceRecord(
        "gpu1", "gpu", 1000.0, 100.0, 10, lead_in_buffered_s=0.62, lead_in_extrapolated_s=0.0
    )
    assert lead_in_notes(_step([cpu, whole], 1000.0, 1010.0, 10.0))[0].endswith(
        "in the totals: cpu extrapolated at the first measured power; gpu from the driver's power samples"
    )
    assert lead_in_notes(_step([gpu], 1000.0, 1100.0, 100.0)) == []  # under 1 % of the step
    late = _step([DeviceRecord("gpu0", "gpu", 1000.0)], 1000.0, 1100.0, 60.0)
    late.nodes[0].start_time = 1040.0  # the agent came 40 s late: nothing reaches back that far
    assert late.late_nodes == [0]
    assert lead_in_notes(late) == [
        "late-start: step 0 node 0: its record covers 60% of the step's time there (its record starts 40 s "
        "after the step, more than the 30 s a lead-in covers); the rest is not in the totals"
    ]
    old = _step([DeviceRecord("gpu0", "gpu", 1000.0)], 1000.0, 1010.0, 9.3)
    old.nodes[0].start_time = 1000.7  # written before the lead-in was covered
    assert lead_in_notes(old)[0].endswith(
        "covers 93% of the step's time there (a record written before easlurm covered its agent's start-up); "
        "the rest is not in the totals"
    )
