"""Bad input gives one line `easlurm: error: ...` naming the option, file or variable, and exit status 2."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.config import load_config
from easlurm.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("easlurm: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_schedd_bad_metrics_port(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedd", "--metrics-port", port, "--once", "--dry-run"]) == 2
    assert "--metrics-port" in one_error_line(capsys)


def test_metrics_port_in_use_is_one_line() -> None:
    pytest.importorskip("prometheus_client", reason="needs the [metrics] extra")
    from easlurm.priority.metrics import Metrics

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"--metrics-port {port}: cannot listen"):
            Metrics().serve(port, addr="127.0.0.1")


def test_metrics_port_from_configuration_is_checked() -> None:
    from easlurm.priority.metrics import check_port

    assert check_port(9101) == 9101
    for bad in (70000, 0, True, "9101"):
        with pytest.raises(ConfigError, match=r"sched\.metrics_port"):
            check_port(bad)


def test_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.psv"
    assert main(["sim", "replay", str(missing), "--out", str(tmp_path / "r")]) == 2
    line = one_error_line(capsys)
    assert str(missing) in line and "easlurm sim replay -h" in line


def test_missing_option_and_unknown_option_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "replay", str(FIXTURES / "minimal.csv")]) == 2
    assert "--out" in one_error_line(capsys)
    assert main(["sim", "run", "--no-such-flag"]) == 2
    assert "--no-such-flag" in one_error_line(capsys)


def test_headerless_dump_suggests_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "dump.psv"
    dump.write_bytes(b"12|\x00\x01\xff|x\n13|\x02|y\n")
    assert main(["sim", "replay", str(dump), "--out", str(tmp_path / "r")]) == 2
    line = one_error_line(capsys)
    assert "--columns" in line and str(dump) in line


def test_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ConfigError, match=r"EASLURM_PROFILER__INTERVAL_S: profiler.interval_s: expected float"
    ):
        load_config(environ={"EASLURM_PROFILER__INTERVAL_S": "fast"}, system_file=Path("/nonexistent"))
    with pytest.raises(ConfigError, match=r"EASLURM_PROFILR__INTERVAL_S: unknown section 'profilr'"):
        load_config(environ={"EASLURM_PROFILR__INTERVAL_S": "1"}, system_file=Path("/nonexistent"))


def test_config_type_error_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sched:\n  policy: zeus\n\nprofiler:\n  devices: gpu\n  interval_s: fast\n  bogus: 1\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}:6: profiler.interval_s: expected float, got 'fast'$"):
        load_config(cfg, environ={}, system_file=Path("/nonexistent"))
    cfg.write_text("sched:\n  policy: zeus\n  bogus: 1\n")
    assert main(["-c", str(cfg), "config"]) == 2
    assert f"{cfg}:3: unknown key sched.bogus" in one_error_line(capsys)


@pytest.mark.skipif(shutil.which("sacct") is None, reason="Slurm's sacct is not installed")
@pytest.mark.skipif(Path("/etc/slurm/slurm.conf").exists(), reason="this host has a system slurm.conf")
def test_sacct_without_slurm_conf_hints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert main(["sacct", "-j", "1"]) == 2
    assert "set SLURM_CONF" in one_error_line(capsys)
