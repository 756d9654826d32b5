"""DRAM model (thesis eq. 4.1-4.2): DIMM base power, usage tiers, DIMM discovery, process-tree share."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

import pytest

from easlurm.energy import EnergyProfiler
from easlurm.energy.dram import (
    DDR5_FACTOR,
    Dimm,
    DramModelSensor,
    dimm_base_power_w,
    dram_power_w,
    mem_use_factor,
    parse_dmidecode,
    parse_smbios_type17,
    rss_bytes,
    tree_pids,
)


@pytest.mark.parametrize(
    ("share", "factor"),
    [
        (0.0, 0.30),
        (0.049, 0.30),
        (0.05, 0.60),
        (0.149, 0.60),
        (0.15, 0.70),
        (0.25, 0.75),
        (0.5, 0.80),
        (1.0, 0.80),
    ],
)
def test_usage_tiers(share: float, factor: float) -> None:
    assert mem_use_factor(share) == factor


def test_base_power_table_and_ddr5() -> None:
    assert dimm_base_power_w(Dimm(256, "DDR4")) == 10.0
    assert dimm_base_power_w(Dimm(64, "DDR4")) == 6.0
    assert dimm_base_power_w(Dimm(16, None)) == 4.0
    assert dimm_base_power_w(Dimm(60, "DDR4")) == 6.0  # nearest class
    assert dimm_base_power_w(Dimm(32, "DDR5")) == pytest.approx(5.0 * DDR5_FACTOR)


def test_equation_4_1_base_times_slots_times_use() -> None:
    dimms = [Dimm(32, "DDR4")] * 8
    assert dram_power_w(dimms, 0.30) == pytest.approx(5.0 * 8 * 0.75)


DMIDECODE = """# dmidecode 3.4
Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tTotal Width: 72 bits
\tSize: 32 GB
\tForm Factor: DIMM
\tLocator: P0_Node0_Channel0_Dimm0
\tType: DDR4

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tSize: No Module Installed
\tType: Unknown

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
\tSize: 16384 MB
\tType: DDR5
"""


def test_parse_dmidecode_skips_empty_slots() -> None:
    assert parse_dmidecode(DMIDECODE) == [Dimm(32.0, "DDR4"), Dimm(16.0, "DDR5")]


def _type17(size_field: int, mem_type: int, ext_mb: int = 0) -> bytes:
    raw = bytearray(0x28)
    raw[0] = 17
    raw[1] = 0x28
    struct.pack_into("<H", raw, 0x0C, size_field)
    raw[0x12] = mem_type
    struct.pack_into("<I", raw, 0x1C, ext_mb)
    return bytes(raw)


def test_parse_smbios_records() -> None:
    assert parse_smbios_type17(_type17(16384, 0x1A)) == Dimm(16.0, "DDR4")
    assert parse_smbios_type17(_type17(0x7FFF, 0x22, ext_mb=65536)) == Dimm(64.0, "DDR5")
    assert parse_smbios_type17(_type17(0, 0x1A)) is None
    assert parse_smbios_type17(b"\x10" + bytes(0x27)) is None  # not a type 17 record


def test_tree_includes_children_and_their_memory() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(5)"],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        pids = tree_pids([os.getpid()])
        assert child.pid in pids and os.getpid() in pids
        assert rss_bytes([child.pid]) > 60 << 20
        assert rss_bytes(pids) > rss_bytes([os.getpid()])
    finally:
        child.kill()
        child.wait()


def test_model_sensor_is_labelled_and_integrates_constant_power() -> None:
    """With a known DIMM set the modelled energy is P(eq. 4.1) x duration; it is always 'modelled'."""
    dimms = [Dimm(64, "DDR4")] * 4
    sensor = DramModelSensor([os.getpid()], dimms, "test")
    sensor.open()
    expected_w = dram_power_w(dimms, sensor.share())
    assert expected_w == pytest.approx(6.0 * 4 * 0.30)  # this test process uses < 5% of memory
    assert sensor.modelled and sensor.source == "dram-model"


def test_profiler_uses_model_only_without_rapl_dram(tmp_path: object) -> None:
    with EnergyProfiler(devices="dram", interval_s=0.02, powercap_root="/nonexistent") as prof:
        time.sleep(0.2)
    r = prof.result
    assert r is not None
    (d,) = r.devices
    assert d.modelled and d.source == "dram-model" and d.energy_j is not None and d.energy_j > 0


def test_children_files_fast_path(tmp_path: object) -> None:
    """Where /proc lists children per task, the tree comes from those files (fake /proc here)."""
    from pathlib import Path

    from easlurm.energy.dram import ProcessTree

    proc = Path(str(tmp_path)) / "proc"
    for pid, kids in {10: "11 12", 11: "13", 12: "", 13: "", 99: ""}.items():
        d = proc / str(pid) / "task" / str(pid)
        d.mkdir(parents=True)
        (d / "children").write_text(kids + " \n" if kids else "")
    extra = proc / "11" / "task" / "14"  # a second thread of 11 that forked 15
    extra.mkdir(parents=True)
    (extra / "children").write_text("15 ")
    (proc / "15" / "task" / "15").mkdir(parents=True)
    (proc / "15" / "task" / "15" / "children").write_text("")
    assert ProcessTree(proc).pids([10]) == {10, 11, 12, 13, 15}
