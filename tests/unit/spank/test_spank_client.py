"""The Slurm client: parsers on output recorded from the local cluster, and the CLI runner (list argv,
explicit format, stderr in errors, --debug echo) against stand-in Slurm commands."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from easlurm.accounting.step_record import decode_admin_comment
from easlurm.errors import SlurmError
from easlurm.slurm.client import SACCT_DELIMITER, CliSlurmClient, parse_sacct_parsable

DATA = Path(__file__).parent / "data"
FIELDS = ["JobIDRaw", "JobID", "AdminComment", "JobName", "State", "Elapsed", "NNodes", "ConsumedEnergy"]


def test_parse_recorded_sacct_output() -> None:
    rows = parse_sacct_parsable((DATA / "sacct_profiled_job.txt").read_text(), FIELDS)
    ids = [r["JobID"] for r in rows]
    assert ids[0].isdigit() and f"{ids[0]}.batch" in ids and f"{ids[0]}.0" in ids
    assert all(r["State"] == "COMPLETED" for r in rows)
    steps = decode_admin_comment(rows[0]["AdminComment"])
    assert sorted(s.step for s in steps) == ["0", "1", "batch"]
    two_node = next(s for s in steps if s.step == "0")
    assert sorted(n.host for n in two_node.nodes) == ["a100-1", "a100-2"]
    assert all(r["AdminComment"] == "" for r in rows[1:])  # only the job row carries it


def test_parse_rejects_wrong_field_count() -> None:
    with pytest.raises(SlurmError, match="2 fields, expected 3"):
        parse_sacct_parsable(f"a{SACCT_DELIMITER}b\n", ["X", "Y", "Z"])


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """sacct/scontrol stand-ins that log their argv and answer from files or fail on demand."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = f"""#!/bin/sh
for a in "$@"; do printf '%s\\n' "$a"; done > {tmp_path}/argv.$(basename $0)
if [ -n "$FAKE_FAIL" ]; then echo "$FAKE_FAIL" >&2; exit 1; fi
[ -f {tmp_path}/out ] && cat {tmp_path}/out
exit 0
"""
    for name in ("sacct", "scontrol", "sacctmgr", "squeue"):
        p = bindir / name
        p.write_text(script)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return bindir


def client(fake_bin: Path, **env: str) -> CliSlurmClient:
    return CliSlurmClient(env={"PATH": f"{fake_bin}:/usr/bin:/bin", **env}, retries=0)


def test_sacct_argv_has_explicit_format_and_delimiter(fake_bin: Path) -> None:
    (fake_bin.parent / "out").write_text(f"7{SACCT_DELIMITER}COMPLETED\n")
    rows = client(fake_bin).sacct(["--jobs=7"], ["JobIDRaw", "State"])
    assert rows == [{"JobIDRaw": "7", "State": "COMPLETED"}]
    argv = (fake_bin.parent / "argv.sacct").read_text().splitlines()
    assert argv == ["-n", "-P", f"--delimiter={SACCT_DELIMITER}", "--format=JobIDRaw,State", "--jobs=7"]


def test_admin_comment_is_one_argv_element(fake_bin: Path) -> None:
    text = "easlurm1:00ff; rm -rf / $(x)"
    client(fake_bin).set_admin_comment(12, text)
    argv = (fake_bin.parent / "argv.scontrol").read_text().splitlines()
    assert argv == ["update", "JobId=12", f"AdminComment={text}"]
    client(fake_bin).set_admin_comment_db(12, "easlurm1:ab")
    argv = (fake_bin.parent / "argv.sacctmgr").read_text().splitlines()
    assert argv == ["-i", "modify", "job", "where", "jobid=12", "set", "AdminComment=easlurm1:ab"]


@pytest.mark.parametrize("bad", ["a|b", "line\nbreak", "caf\u00e9"])
def test_admin_comment_values_that_sacct_would_break_are_refused(fake_bin: Path, bad: str) -> None:
    with pytest.raises(SlurmError, match="ASCII"):
        client(fake_bin).set_admin_comment(1, bad)


def test_errors_carry_stderr(fake_bin: Path) -> None:
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        client(fake_bin, FAKE_FAIL="slurm_update error: Invalid job id specified").set_admin_comment(1, "x")


def test_missing_command_is_a_slurm_error(tmp_path: Path) -> None:
    c = CliSlurmClient(env={"PATH": str(tmp_path)})
    with pytest.raises(SlurmError, match="command not found"):
        c.sacct([], ["JobID"])


def test_debug_echoes_command_and_output(fake_bin: Path) -> None:
    (fake_bin.parent / "out").write_text(
        '{"jobs": [{"job_id": 5, "job_state": "RUNNING", "restart_cnt": 1}]}\n'
    )
    lines: list[str] = []
    c = CliSlurmClient(env={"PATH": f"{fake_bin}:/usr/bin:/bin"}, debug=True, echo=lines.append)
    c._version = (22, 5, 8)  # what `scontrol --version` would say: the fake answers everything from one file
    job = c.show_job(5)
    assert job["JobState"] == "RUNNING" and job["Restarts"] == "1"
    # 22.05: the one-job framed text read first; the fake answers JSON to it, so the text read is refused
    # and the queue is read as JSON: each command is echoed, then its output
    commands = [ln for ln in lines if ln.startswith("$ ")]
    assert commands[0] == "$ squeue -h -t all -j 5" and commands[-1] == "$ squeue --json", lines
    assert '"job_id": 5' in lines[lines.index("$ squeue --json") + 1]


def test_environment_is_passed(fake_bin: Path) -> None:
    c = client(fake_bin, SLURM_CONF="/x/slurm.conf")
    assert c.env["SLURM_CONF"] == "/x/slurm.conf"
    assert "SLURM_CONF" not in os.environ or os.environ["SLURM_CONF"] != "/x/slurm.conf"
