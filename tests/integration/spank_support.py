"""Shared helpers for the SPANK integration tests: the plugin pointed at fake sensors, and easlurm runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GPU_W = 250.0


@contextlib.contextmanager
def plugin_with_fake_sensors(
    box: Any,
    *extra: str,
    agent: str | None = None,
    spool: str | Path | None = None,
    timeout_ms: int = 2000,
    gpu_w: float = GPU_W,
) -> Iterator[Path]:
    """(Re)install the plugin, point its agents at the fake NVML (8 GPUs at `gpu_w` W each) plus any extra
    `key=value` plugstack arguments, yield the spool directory, and restore the previous line after."""
    subprocess.run(
        [str(REPO / "spank" / "install-box"), str(box.dir), sys.executable], check=True, capture_output=True
    )
    conf = Path(box.dir) / "etc" / "plugstack.d" / "easlurm.conf"
    original = conf.read_text()
    spool_dir = Path(spool) if spool else Path(box.dir) / "spool" / "easlurm"
    args = [
        f"agent={agent or sys.executable}",
        f"spool={spool_dir}",
        f"timeout_ms={timeout_ms}",
        f"env=SLURM_CONF={box.env['SLURM_CONF']}",
        f"env=PYTHONPATH={REPO / 'src'}:{REPO / 'tests' / 'fakes'}",
        "env=EASLURM_PROFILER__NVML_MODULE=easlurm_fakes.fake_nvml",
        "env=EASLURM_FAKE_NVML_COUNT=8",
        f"env=EASLURM_FAKE_NVML_POWER_W={gpu_w:g}",
        *extra,
    ]
    tmp = conf.with_name(".easlurm.conf.test")
    tmp.write_text(f"optional {box.dir}/lib/easlurm_spank.so {' '.join(args)}\n")
    os.replace(tmp, conf)
    try:
        yield spool_dir
    finally:
        tmp.write_text(original)
        os.replace(tmp, conf)


def run_easlurm(box: Any, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    """`python -m easlurm.cli ARGS` against the box, from this checkout's sources."""
    env = {**os.environ, **box.env, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", "easlurm.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def slurmd_log(box: Any, job: str) -> str:
    """The slurmd log lines (all nodes) of `job`'s steps: where the plugin reports on its agents."""
    text = ""
    for log in sorted((Path(box.dir) / "log").glob("slurmd-*.log")):
        text += "".join(ln for ln in log.read_text(errors="replace").splitlines(True) if f"[{job}." in ln)
    return text
