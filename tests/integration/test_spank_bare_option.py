"""Profiling never fails a job: every form of `--energy-profile` given to sbatch (bare, as the README
writes it, or with a SPEC) reaches the job's `srun` steps, bare or with their own SPEC, and the job ends
COMPLETED 0:0 with a record per step. Slurm 22.05's sbatch exports a bare option to the job's
environment as the literal text `(null)`; each inner srun replays it, and the plugin must read it as
"no value" (the default SPEC), not as a SPEC to reject."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm

pytestmark = pytest.mark.slurm


def state_and_exit(box: Any, job: str) -> tuple[str, str]:
    res = box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,ExitCode"])
    state, exit_code = res.stdout.strip().splitlines()[0].split("|")
    return state, exit_code


def records(box: Any, job: str, steps: set[str], timeout_s: float = 60) -> dict[str, dict[str, Any]]:
    """`easlurm sacct -j JOB`'s step rows once every step in `steps` carries its energy record."""
    deadline = time.monotonic() + timeout_s
    while True:
        res = run_easlurm(box, "sacct", "-j", job, "--json", timeout=60)
        assert res.returncode == 0, res.stderr
        rows = {r["job_id"].split(".", 1)[1]: r for r in json.loads(res.stdout)["rows"] if "." in r["job_id"]}
        if all(rows.get(s, {}).get("energy_record") for s in steps) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def run_profiled(box: Any, tmp_path: Path, option: str, script: str) -> str:
    """Submit `script` with `option` on the sbatch command line; return the job id once it has ended."""
    path = tmp_path / "job.sh"
    path.write_text(script)
    with plugin_with_fake_sensors(box):
        job = box.sbatch(
            "-p", "a100", "-N1", "--gres=gpu:a100:2", option, "-o", str(tmp_path / "out"), str(path)
        )
        box.wait_job(job)
    return job


def test_bare_sbatch_option_with_bare_and_explicit_inner_srun(slurm_box: Any, tmp_path: Path) -> None:
    """The README's form, `sbatch --energy-profile`, with one bare inner srun and one
    `srun --energy-profile=all`: COMPLETED 0:0, and the batch step and both srun steps have records."""
    script = textwrap.dedent("""\
        #!/bin/sh
        srun sleep 1 || exit 3
        srun --energy-profile=all sleep 1 || exit 4
        """)
    job = run_profiled(slurm_box, tmp_path, "--energy-profile", script)
    out = (tmp_path / "out").read_text()
    assert state_and_exit(slurm_box, job) == ("COMPLETED", "0:0"), out
    assert "invalid" not in out, out
    rows = records(slurm_box, job, {"batch", "0", "1"})
    specs = {step: rows[step]["energy_record"]["spec"] for step in ("batch", "0", "1")}
    # the bare option is the default SPEC everywhere; the explicit one reaches its own step
    assert specs == {"batch": "", "0": "", "1": "all"}, specs


@pytest.mark.parametrize(
    "spec",
    [None, "all", "gpu,cpu", "model=resnet50,steps=100,batch=64"],
    ids=["bare", "all", "gpu-cpu", "declared"],
)
def test_every_spec_form_reaches_the_steps(slurm_box: Any, tmp_path: Path, spec: str | None) -> None:
    """sbatch --energy-profile[=SPEC] -> an inner bare srun inherits it -> every step is profiled with it."""
    option = "--energy-profile" if spec is None else f"--energy-profile={spec}"
    script = "#!/bin/sh\nsrun sleep 1 || exit 3\nsrun -n1 sleep 1 || exit 4\n"
    job = run_profiled(slurm_box, tmp_path, option, script)
    out = (tmp_path / "out").read_text()
    assert state_and_exit(slurm_box, job) == ("COMPLETED", "0:0"), out
    rows = records(slurm_box, job, {"batch", "0", "1"})
    for step in ("batch", "0", "1"):
        rec = rows[step].get("energy_record")
        assert rec, (step, rows.get(step), out)
        assert rec["spec"] == (spec or ""), (step, rec["spec"])
        assert rows[step]["gpu_energy_j"] and rows[step]["gpu_energy_j"] > 0, (step, rows[step])


def test_inherited_value_that_does_not_parse_never_fails_a_step(slurm_box: Any, tmp_path: Path) -> None:
    """A value in the job's environment was accepted at submission: if it no longer parses (edited by
    hand, written by another plugin version), an inner srun runs unprofiled instead of failing. A SPEC
    typed on the inner srun's own command line is still checked and refused."""
    script = textwrap.dedent("""\
        #!/bin/sh
        SLURM_SPANK__SLURM_SPANK_OPTION_easlurm_energy_profile='no such spec!' srun sleep 1 || exit 3
        srun --energy-profile=nvme true 2>typed.err && exit 4
        grep -q 'invalid --energy-profile' typed.err || exit 5
        srun sleep 1 || exit 6
        """)
    path = tmp_path / "job.sh"
    path.write_text(script)
    tmp_path.chmod(0o755)
    with plugin_with_fake_sensors(slurm_box):
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "-N1",
            "--energy-profile=gpu",
            "-D",
            str(tmp_path),
            "-o",
            str(tmp_path / "out"),
            str(path),
        )
        slurm_box.wait_job(job)
    out = (tmp_path / "out").read_text()
    assert state_and_exit(slurm_box, job) == ("COMPLETED", "0:0"), out
    assert "not profiling, invalid inherited --energy-profile" in out, out
    rows = records(slurm_box, job, {"batch", "1"})
    assert rows["batch"]["energy_record"]["spec"] == "gpu"
    assert rows["1"]["energy_record"]["spec"] == "gpu"
    assert not rows.get("0", {}).get("energy_record"), rows.get("0")
