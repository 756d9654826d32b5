"""`easlurm profile`: exit status of the command, signal forwarding, summary, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from easlurm_fakes.powercap import FakePowercap

FAKES = Path(__file__).resolve().parents[2] / "fakes"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EASLURM_", "CUDA_VISIBLE", "SLURM_"))}
    env.update(
        PYTHONPATH=f"{FAKES}{os.pathsep}{env.get('PYTHONPATH', '')}",
        EASLURM_PROFILER__NVML_MODULE="easlurm_fakes.fake_nvml",
        EASLURM_PROFILER__POWERCAP_ROOT=str(tmp_path / "no-powercap"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
    )
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "easlurm.cli", "profile", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


def test_exit_code_summary_and_run_dir(tmp_path: Path) -> None:
    env = _env(tmp_path, EASLURM_FAKE_NVML_COUNT="2", EASLURM_FAKE_NVML_POWER_W="300")
    out = tmp_path / "run"
    res = _run(
        [
            "--interval",
            "20ms",
            "--out",
            str(out),
            "--",
            sys.executable,
            "-c",
            "import time,sys; time.sleep(0.3); sys.exit(7)",
        ],
        env,
    )
    assert res.returncode == 7, res.stderr
    assert "exited 7" in res.stderr and "gpu1" in res.stderr and "TOTAL" in res.stderr
    assert "modelled" in res.stderr  # no RAPL here: the DRAM model is labelled
    summary = json.loads((out / "summary.json").read_text())
    gpu = next(d for d in summary["devices"] if d["name"] == "gpu0")
    assert gpu["energy_j"] == pytest.approx(300.0 * gpu["duration_s"], rel=0.01)


def test_json_output_to_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    res = _run(["--devices", "gpu", "--json", "--output", str(target), "--", "true"], _env(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(target.read_text())
    assert doc["exit_code"] == 0 and doc["command"] == ["true"] and doc["gpu_energy_j"] is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--devices", "gpu,fpga", "--", "true"], "unknown device 'fpga'"),
        (["--", "no-such-command-xyz"], "no-such-command-xyz: command not found"),
        (["--", "{data}"], "permission denied"),
        (["--", "{script}"], "Exec format error"),
        ([], "no command given"),
        (["--interval", "fast", "--", "true"], "cannot parse duration"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "run"
    data, script = tmp_path / "data.txt", tmp_path / "noshebang"
    data.write_text("not a program\n")
    data.chmod(0o644)
    script.write_text("\x7fELF garbage\n")
    script.chmod(0o755)
    args = [a.format(data=data, script=script) for a in args]
    res = _run(["--out", str(out), *args], _env(tmp_path))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and message in res.stderr
    assert not out.exists()


def test_profiling_failure_never_fails_the_command(tmp_path: Path) -> None:
    """A GPU that is there but fails (lost at once) loses the measurement, never the command's run. (A GPU
    sensor that does not exist at all, when --devices names it, is refused: test_energy_nosensor.py.)"""
    env = _env(tmp_path, EASLURM_FAKE_NVML_LOST="0:0", PATH="/usr/bin:/bin")
    res = _run(["--devices", "gpu", "--", "sh", "-c", "echo ran; exit 4"], env)
    assert res.returncode == 4 and res.stdout == "ran\n"


def test_signals_are_forwarded_to_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "got-term"
    script = f"import signal,sys,time\nsignal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r},'w').close(), sys.exit(5)))\nprint('ready', flush=True)\ntime.sleep(30)\n"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "easlurm.cli",
            "profile",
            "--devices",
            "gpu",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 5, err
    assert marker.exists() and "exited 5" in err


def test_list_sensors_explains_what_is_missing(tmp_path: Path) -> None:
    fp = FakePowercap(tmp_path / "pc", sockets=1, subzones=("core",))
    try:
        env = _env(tmp_path, EASLURM_FAKE_NVML_COUNT="3", EASLURM_PROFILER__POWERCAP_ROOT=str(fp.root))
        res = _run(["--list-sensors", "-P"], env)
    finally:
        fp.close()
    assert res.returncode == 0, res.stderr
    rows = {line.split("|")[0]: line.split("|") for line in res.stdout.splitlines()[1:]}
    assert {"gpu0", "gpu1", "gpu2", "package-0", "core-0", "dram"} <= set(rows)
    assert rows["dram"][2] == "dram-model" and rows["dram"][3] == "found"  # no RAPL dram zone: modelled
    assert rows["amdsmi"][3] == "missing"
