"""The validation layer at the boundary (easlurm.inputs), beyond the one-line table: inputs that hung
(each run in a subprocess under `timeout`), outputs left behind by a start that failed later, `--skip-bad`
on NaN rows, valid input that was refused (a UTF-8 BOM), and the layer's own rules on valid YAML."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError
from easlurm.inputs import MAX_YAML_BYTES, load_yaml
from easlurm.table import parse_format

ROOT = Path(__file__).resolve().parents[3]
#: a hang is a run still going after this long; every case below answers in about a second
HANG_S = 60


def _easlurm(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EASLURM_")}
    env["XDG_CONFIG_HOME"] = str(cwd / "xdg")
    code = "import sys; from easlurm.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        ["timeout", str(HANG_S), sys.executable, "-c", code, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _fifo(tmp: Path) -> str:
    path = tmp / "fifo"
    os.mkfifo(path)
    return str(path)


def _big(tmp: Path) -> str:
    path = tmp / "big.yaml"
    line = "# " + "x" * 1021 + "\n"
    path.write_text("sim:\n  hours: 1\n" + line * (MAX_YAML_BYTES // len(line) + 16))
    return str(path)


#: id -> (argv builder, text the one line names); each hung (timeout's exit 124) or, the FIFO config, was "not found"
HANGS = {
    "fifo-params-predict": (lambda t: ["predict", "--model", "resnet50", "--params", _fifo(t)], "FIFO"),
    "fifo-co2-csv-report": (lambda t: ["report", "--co2-csv", _fifo(t)], "FIFO"),
    "fifo-config-config": (lambda t: ["-c", _fifo(t), "config"], "FIFO"),
    "big-config-config": (lambda t: ["-c", _big(t), "config"], "limit"),
    "billions-of-jobs-run": (
        lambda t: ["sim", "run", "--policy", "zeus", "--hours", "87600", "--load", "100000"],
        "over the limit",
    ),
}


@pytest.mark.parametrize("case_id", sorted(HANGS))
def test_input_that_hung_is_refused_at_once(case_id: str, tmp_path: Path) -> None:
    """Rule: a FIFO is no input file, a file over 16 MiB is refused unread, work is sized before it starts."""
    build, names = HANGS[case_id]
    proc = _easlurm(build(tmp_path), tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("easlurm: error: ") and names in lines[0], proc.stderr


def test_schedd_once_failing_on_slurm_leaves_no_decision_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: outputs are tried, not created, before the work: a start that fails on Slurm writes nothing."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # Slurm's own commands refuse it at once ("ClusterName needs to be specified")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    log = tmp_path / "logs" / "decisions.jsonl"
    code = main(["schedd", "--once", "--dry-run", "--nodes", "n0", "--decision-log", str(log)])
    assert code == 2, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slurm.conf"], (
        "the decision log (or its folder) was left"
    )


def test_skip_bad_skips_nan_swf_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Rule: NaN and inf fields are bad rows; `--skip-bad` skips them (it crashed on them before)."""
    row = "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 1 -1 -1\n"
    swf = tmp_path / "nan.swf"
    swf.write_text(
        "; ProcsPerGPU: 1\n" + row + row.replace("1 0 10", "2 nan 10") + row.replace("1 0 10", "3 0 inf")
    )
    assert main(["sim", "replay", str(swf), "--skip-bad", "--out", str(tmp_path / "out")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert "field submit_time" in caplog.text and "field wait_time" in caplog.text, caplog.text


def test_csv_with_a_utf8_bom_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rule: a UTF-8 BOM (spreadsheets write one) is no part of the first column's name."""
    trace = tmp_path / "bom.csv"
    trace.write_bytes(b"\xef\xbb\xbfsubmit,duration,gpus\n0,3600,4\n60,600,1\n")
    assert main(["sim", "replay", str(trace), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    measurements = tmp_path / "m.csv"
    measurements.write_bytes(
        b"\xef\xbb\xbfmodel,batch,precision,n_gpus,gpu,step_time_s\nresnet50,64,bf16,1,h100-sxm,0.12\n"
    )
    assert main(["model", "evaluate", str(measurements)]) == 0, capsys.readouterr().err


def test_sacct_format_width_is_bounded() -> None:
    """Rule: `NAME%999...` is refused in one line (str.format raised OverflowError on it)."""
    with pytest.raises(ConfigError, match="width after % must be between"):
        parse_format("JobID%99999999999999999999", ["JobID"], ["JobID"])
    assert parse_format("JobID%-20", ["JobID"], ["JobID"])[0].width == -20


def test_yaml_rules_keep_valid_documents() -> None:
    """Anchors and merge keys within the budget load as YAML says; the shipped thesis plan uses aliases."""
    assert load_yaml("a: &x [1, 2]\nb: *x\n", "f") == {"a": [1, 2], "b": [1, 2]}
    assert load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n", "f")["d"] == {"x": 3, "y": 2}
    assert load_yaml("", "f") is None
    with pytest.raises(ConfigError, match=r"f:3: duplicate key 'b'"):
        load_yaml("a: 1\nc: {b: 1,\n  b: 2}\n", "f")
    from easlurm.sim.campaign import load_plan

    assert load_plan(ROOT / "campaigns" / "thesis.yaml").runs()
