"""`easlurm sacct` against Slurm's own sacct on the same jobs of the real local cluster: for every option
the two share, the same rows in the same order, every native cell equal, and -p/-P/--delimiter/%N output
whose native part is byte for byte sacct's, the energy columns following.

The one difference, by design: sacct prints a delimiter found inside a value (a job named `a|b`)
unchanged, so that line splits into one field too many; easlurm prints '/' in its place and says so on
stderr, so every line of its -p/-P output parses.
"""

from __future__ import annotations

import datetime as dt
import json
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm

pytestmark = pytest.mark.slurm

#: Native fields compared cell by cell; energy columns come after them in easlurm's --format.
NATIVE = (
    "JobID,JobIDRaw,JobName,State,ExitCode,Elapsed,NNodes,Partition,Account,User,QOS,ConsumedEnergy,MaxRSS"
)
ENERGY = "TotalEnergy,TotalEnergyRaw,EDP,EnergyFlags"
PIPE_NAME = "pipe|name"


@dataclass
class Jobs:
    profiled: str
    plain: str
    failed: str
    piped: str
    other_account: str
    since: str

    @property
    def ids(self) -> list[str]:
        return [self.profiled, self.plain, self.failed, self.piped, self.other_account]


def sacct(box: Any, *args: str) -> str:
    res = box.run(["sacct", *args], timeout=60)
    return str(res.stdout)


def easlurm(box: Any, *args: str) -> tuple[str, str]:
    res = run_easlurm(box, "sacct", "--no-spool", *args, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout, res.stderr


@pytest.fixture(scope="module")
def jobs(slurm_box: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    """A profiled job (batch + two srun steps), an unprofiled one on two nodes, a failed one, one whose
    name holds '|' and one charged to another account; all finished, the profiled one's records in."""
    tmp = tmp_path_factory.mktemp("parity")
    tmp.chmod(0o755)
    since = (dt.datetime.now() - dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    script = tmp / "job.sh"
    script.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        srun sleep 2
        srun true
        """)
    )
    out = str(tmp / "out")
    with plugin_with_fake_sensors(slurm_box):
        profiled = slurm_box.sbatch(
            "-p",
            "a100",
            "-N1",
            "--gres=gpu:a100:2",
            "--energy-profile=all",
            "-J",
            "prof",
            "-o",
            out,
            str(script),
        )
        assert slurm_box.wait_job(profiled, 90) == "COMPLETED"
        plain = slurm_box.sbatch("-p", "h100", "-N2", "-J", "plain", "-o", out, "--wrap", "srun -N2 true")
        failed = slurm_box.sbatch("-p", "cpu", "-J", "fails", "-o", out, "--wrap", "srun false")
        piped = slurm_box.sbatch("-p", "cpu", "-J", PIPE_NAME, "-o", out, "--wrap", "srun true")
        other = slurm_box.sbatch("-p", "cpu", "-A", "root", "-J", "acct", "-o", out, "--wrap", "true")
        for job in (plain, failed, piped, other):
            state = slurm_box.wait_job(job, 90)
            assert state in ("COMPLETED", "FAILED"), (job, state)
        deadline = time.monotonic() + 60
        ids = [profiled, plain, failed, piped, other]
        while True:  # 22.05 first stores a job as `allocation` with no partition or QOS, until slurmctld's
            # start record reaches the database: compare the two commands on complete records only
            rows = sacct(slurm_box, "-n", "-X", "-P", "-j", ",".join(ids), "-o", "JobName,Partition,QOS")
            if len(rows.splitlines()) == len(ids) and all(
                not ln.startswith("allocation|") and ln.split("|")[1] and "Unknown" not in ln.split("|")[2:]
                for ln in rows.splitlines()
            ):
                break
            assert time.monotonic() < deadline, f"incomplete database records: {rows!r}"
            time.sleep(1)
        deadline = time.monotonic() + 60
        while True:  # the database has the job under the account it was charged to (its end record)
            charged = sacct(slurm_box, "-n", "-X", "-P", "-j", other, "-o", "Account").split()
            if charged == ["root"]:
                break
            assert time.monotonic() < deadline, f"job {other} charged to {charged}, not root"
            time.sleep(1)
        deadline = time.monotonic() + 120
        while True:  # the agents publish the records as the steps end: wait for all three
            doc = json.loads(easlurm(slurm_box, "-j", profiled, "--json")[0])
            steps = {r["job_id"]: r for r in doc["rows"]}
            if all(steps.get(f"{profiled}.{s}", {}).get("energy_record") for s in ("batch", "0", "1")):
                break
            assert time.monotonic() < deadline, f"records of {profiled} never arrived: {steps}"
            time.sleep(2)
    yield Jobs(profiled, plain, failed, piped, other, since)


def _mine(lines: list[str], ids: list[str], delimiter: str = "|") -> list[str]:
    """Lines of our jobs only (selections by time, user or state may see other tests' jobs)."""
    return [ln for ln in lines if ln.split(delimiter)[0].split(".")[0] in ids]


def selections(j: Jobs) -> dict[str, list[str]]:
    """Every selection option shared with sacct, each on its own (plus the window it needs)."""
    every = ",".join(j.ids)
    window = ["-S", j.since, "-E", "now"]
    return {
        "-j": ["-j", every],
        "-X": ["-X", "-j", every],
        "-D": ["-D", "-j", every],
        "-S/-E": window,
        "-a": ["-a", *window],
        "-u": ["-u", "root", *window],
        "-A": ["-A", "root", *window],
        "-s": ["-s", "F", *window],
        "-r": ["-r", "h100", *window],
        "-N": ["-N", "h100-2", *window],
        "--name": ["--name", "plain,fails", *window],
        "-q": ["-q", "normal", *window],
    }


def test_every_selection_gives_sacct_rows_and_cells(slurm_box: Any, jobs: Jobs) -> None:
    """-P -n with each selection option: our jobs' lines are sacct's lines, each followed by energy cells."""
    for name, sel in selections(jobs).items():
        theirs = _mine(sacct(slurm_box, *sel, "-P", "-n", "-o", NATIVE).splitlines(), jobs.ids)
        ours_text, _ = easlurm(slurm_box, *sel, "-P", "-n", "-o", f"{NATIVE},{ENERGY}")
        ours = _mine(ours_text.splitlines(), jobs.ids)
        assert theirs, f"{name}: sacct shows none of the test's jobs"
        assert len(ours) == len(theirs), (name, theirs, ours)
        for mine, real in zip(ours, theirs, strict=True):
            if PIPE_NAME in real:  # the documented difference: the delimiter inside the name
                real = real.replace(PIPE_NAME, PIPE_NAME.replace("|", "/"))
            cells = mine.split("|")
            assert len(cells) == NATIVE.count(",") + 1 + ENERGY.count(",") + 1, (name, mine)
            assert "|".join(cells[: NATIVE.count(",") + 1]) == real, (name, mine, real)


def test_selection_semantics_are_the_expected_ones(slurm_box: Any, jobs: Jobs) -> None:
    """The checks above compare like with like; these say the options selected what they should."""
    sel = selections(jobs)
    ids = {
        k: {ln.split("|")[0] for ln in easlurm(slurm_box, *v, "-P", "-n", "-o", "JobID")[0].splitlines()}
        for k, v in sel.items()
    }
    assert ids["-X"] & set(jobs.ids) == set(jobs.ids) and all("." not in i for i in ids["-X"])
    assert jobs.failed in ids["-s"] and jobs.plain not in ids["-s"]
    assert ids["-A"] & set(jobs.ids) == {jobs.other_account}
    assert jobs.plain in ids["-r"] and jobs.profiled not in ids["-r"]
    assert ids["--name"] & set(jobs.ids) == {jobs.plain, jobs.failed}


def test_p_P_delimiter_and_widths_print_sacct_bytes(slurm_box: Any, jobs: Jobs) -> None:
    """-p, -P, --delimiter, -n and NAME%N: each line of easlurm's output starts with sacct's line."""
    sel = ["-j", f"{jobs.profiled},{jobs.plain},{jobs.failed}"]
    native = "JobID,JobName,State,Elapsed,NNodes"
    for fmt in (["-p"], ["-P"], ["-p", "--delimiter=;"], ["-P", "--delimiter=;"], ["-p", "-n"]):
        theirs = sacct(slurm_box, *sel, *fmt, "-o", native).splitlines()
        ours = easlurm(slurm_box, *sel, *fmt, "-o", f"{native},TotalEnergy")[0].splitlines()
        delim = ";" if "--delimiter=;" in fmt else "|"
        assert len(ours) == len(theirs), (fmt, theirs, ours)
        for mine, real in zip(ours, theirs, strict=True):
            joint = real if fmt[0] == "-p" else real + delim  # -P: our energy cell follows a delimiter
            assert mine.startswith(joint), (fmt, mine, real)
            assert mine.count(delim) == real.count(delim) + 1, (fmt, mine, real)
    widths = "JobID%-10,JobName%6,State%-12,Elapsed%9,NNodes%3"
    theirs = sacct(slurm_box, *sel, "-o", widths).splitlines()
    ours = easlurm(slurm_box, *sel, "-o", f"{widths},TotalEnergy%10")[0].splitlines()
    assert len(ours) == len(theirs)
    for mine, real in zip(ours, theirs, strict=True):
        # sacct ends every cell with a space; easlurm strips the line's trailing blanks
        assert (mine + " ").startswith(real.rstrip() + " "), (mine, real)


def test_units_and_noconvert_reach_native_and_energy_columns(slurm_box: Any, jobs: Jobs) -> None:
    sel = ["-j", jobs.profiled, "-P", "-n"]
    for opt in ("--units=M", "--units=K", "--noconvert"):
        theirs = sacct(slurm_box, *sel, opt, "-o", NATIVE).splitlines()
        ours = easlurm(slurm_box, *sel, opt, "-o", f"{NATIVE},TotalEnergy,TotalEnergyRaw")[0].splitlines()
        assert [ln.rsplit("|", 2)[0] for ln in ours] == theirs, opt
        step0 = next(ln.split("|") for ln in ours if ln.startswith(f"{jobs.profiled}.0|"))
        unit = {"--units=M": "MJ", "--units=K": "kJ", "--noconvert": "J"}[opt]
        assert step0[-2].endswith(unit) and step0[-2][: -len(unit)][-1].isdigit(), (opt, step0)
        assert float(step0[-1]) > 0  # the raw column: joules, whatever the display unit


def test_energy_columns_profiled_unprofiled_and_job_totals(slurm_box: Any, jobs: Jobs) -> None:
    """Profiled steps carry energy, unprofiled ones none; under -X each job row carries its job's total."""
    rows = {
        ln.split("|")[0]: ln.split("|")
        for ln in easlurm(
            slurm_box, "-j", f"{jobs.profiled},{jobs.plain}", "-P", "-n", "-o", f"JobID,{ENERGY}"
        )[0].splitlines()
    }
    assert float(rows[f"{jobs.profiled}.0"][2]) > 0 and float(rows[f"{jobs.profiled}.batch"][2]) > 0
    assert rows[jobs.plain][1:4] == ["", "", ""] and rows[f"{jobs.plain}.0"][1:4] == ["", "", ""]
    x = easlurm(slurm_box, "-X", "-j", jobs.profiled, "-P", "-n", "-o", "JobID,TotalEnergyRaw,EnergyFlags")[0]
    job_id, total, flags = x.strip().split("|")
    assert job_id == jobs.profiled and total == rows[jobs.profiled][2] and flags.startswith("job-total")


def test_json_has_sacct_rows_with_numbers(slurm_box: Any, jobs: Jobs) -> None:
    sel = ["-j", f"{jobs.profiled},{jobs.plain}"]
    theirs = sacct(slurm_box, *sel, "-P", "-n", "-o", "JobID,NNodes,ElapsedRaw").splitlines()
    doc = json.loads(easlurm(slurm_box, *sel, "--json", "-o", "JobID,NNodes,Elapsed,ConsumedEnergy")[0])
    assert doc["schema_version"] == 2
    assert [r["job_id"] for r in doc["rows"]] == [ln.split("|")[0] for ln in theirs]
    for row, line in zip(doc["rows"], theirs, strict=True):
        _, nnodes, elapsed = line.split("|")
        assert row["n_nodes"] == int(nnodes) and row["elapsed_s"] == float(elapsed)
        assert isinstance(row["consumed_energy_j"], int)
    step0 = next(r for r in doc["rows"] if r["job_id"] == f"{jobs.profiled}.0")
    assert step0["total_energy_j"] > 0 and step0["edp_j_s"] > 0


def test_a_delimiter_in_a_job_name(slurm_box: Any, jobs: Jobs) -> None:
    """sacct -P prints `pipe|name` as is (one field too many); easlurm prints `pipe/name` and warns."""
    real = sacct(slurm_box, "-X", "-j", jobs.piped, "-P", "-n", "-o", "JobID,JobName,State").strip()
    assert real.split("|") == [jobs.piped, "pipe", "name", "COMPLETED"]
    mine, err = easlurm(slurm_box, "-X", "-j", jobs.piped, "-P", "-n", "-o", "JobID,JobName,State")
    assert mine.strip().split("|") == [jobs.piped, "pipe/name", "COMPLETED"]
    assert "JobName" in err and "delimiter" in err
    # with another delimiter the name comes through unchanged in both
    real = sacct(slurm_box, "-X", "-j", jobs.piped, "-P", "-n", "--delimiter=;", "-o", "JobID,JobName")
    mine, err = easlurm(slurm_box, "-X", "-j", jobs.piped, "-P", "-n", "--delimiter=;", "-o", "JobID,JobName")
    assert mine == real and not err
