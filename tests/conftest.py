"""Session fixtures: the real local Slurm cluster for tests marked `slurm`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _box_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root"
    if shutil.which("slurmctld") is None and not Path("/usr/sbin/slurmctld").exists():
        return "Slurm packages not installed (scripts/slurm-box install)"
    from easlurm.slurm.box import SlurmBox

    missing = SlurmBox.missing_packages()
    return f"packages missing: {' '.join(missing)}" if missing else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `slurm` tests with the reason where the box cannot run; in CI they must run, never skip.

    The long `docs` campaigns come first: `make test` runs the unit and docs tests in a lane beside the
    Slurm tests, and a campaign that started last would hold that lane up at the end."""
    items.sort(key=lambda item: item.get_closest_marker("docs") is None)  # stable: order kept otherwise
    if not any(item.get_closest_marker("slurm") for item in items):
        return
    reason = _box_unavailable_reason()
    if reason is None:
        return
    if IN_CI:
        raise pytest.UsageError(f"CI=true but the Slurm integration tests cannot run: {reason}")
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _oracle_files_not_inherited() -> Iterator[None]:
    """Commands export `oracle.params`/`oracle.hardware` for their child processes (os.environ); an
    in-process CLI test must not hand its files to the tests after it."""
    names = ("EASLURM_ORACLE__PARAMS", "EASLURM_ORACLE__HARDWARE")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@dataclass
class BoxHandle:
    """What a Slurm integration test needs: the box, client environment and small job helpers."""

    box: object
    dir: Path
    env: dict[str, str]

    def run(
        self, argv: Sequence[str], check: bool = True, timeout: float = 120, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, timeout=timeout, check=False, **kw
        )  # type: ignore[call-overload]
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def sbatch(self, *args: str) -> str:
        """Submit and return the job id."""
        return self.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]

    def wait_job(self, job_id: str, timeout_s: float = 60.0) -> str:
        """Wait until the job's allocation row in sacct has a final state; return that state."""
        from easlurm.slurm.states import FINAL_JOB_STATES

        final = tuple(FINAL_JOB_STATES)
        end = time.monotonic() + timeout_s
        state = ""
        # Leave squeue first: after a box reset sacct may still hold an older job with the same id.
        while time.monotonic() < end:
            res = self.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False)
            if res.returncode != 0 or not res.stdout.strip():
                break
            time.sleep(0.3)
        while time.monotonic() < end:
            res = self.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], check=False)
            state = res.stdout.strip().split("\n")[0].split()[0] if res.stdout.strip() else ""
            if state.startswith(final):
                return state
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not finished after {timeout_s}s (state {state!r})")


@pytest.fixture(scope="session")
def slurm_box() -> Iterator[BoxHandle]:
    """Bring the local cluster up once per session; stop it at the end only if this session started it."""
    from easlurm.slurm.box_cli import make_box

    box = make_box()
    was_up = box.is_up()
    t0 = time.monotonic()
    box.up()
    if not was_up:
        print(f"\nslurm-box up in {time.monotonic() - t0:.1f} s")
    os.environ.update(box.env)
    try:
        yield BoxHandle(box=box, dir=box.paths.root, env=box.client_env())
    finally:
        if not was_up:
            box.down()
