"""The one Slurm client: an abstract interface, parsers of recorded output, and the CLI implementation.

Everything in easlurm that talks to Slurm goes through `SlurmClient`; the scheduler daemon extends it.
The CLI implementation runs sacct/scontrol/sacctmgr with a list argv (never a shell), explicit
`--format`, a delimiter that free-text fields cannot contain, and puts the command's stderr in errors.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.json_values import integer, job_state, load_document
from easlurm.slurm.squeue_text import SHOW_FIELDS, Frame, SqueueTextError, show_job_argv, show_job_fields

#: The first Slurm release with `scontrol --json` (per-node and per-job documents).
SCONTROL_JSON_SINCE = (23, 2)

log = logging.getLogger(__name__)

#: sacct -P field separator: ASCII unit separator, which job names and comments do not contain.
SACCT_DELIMITER = "\x1f"
DEFAULT_TIMEOUT_S = 60.0


def parse_sacct_parsable(
    text: str, fields: Sequence[str], delimiter: str = SACCT_DELIMITER
) -> list[dict[str, str]]:
    """Rows of `sacct -n -P --delimiter=D --format=fields` as dicts keyed by the requested field names."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(delimiter)
        if len(parts) != len(fields):
            raise SlurmError(
                f"sacct output line {lineno}: {len(parts)} fields, expected {len(fields)} ({line[:80]!r})"
            )
        rows.append(dict(zip(fields, parts)))
    return rows


def parse_version(text: str) -> tuple[int, ...] | None:
    """`scontrol --version` ("slurm 24.11.5", "slurm-wlm 22.05.8") -> (24, 11, 5); None if unreadable."""
    for word in reversed(text.split()):
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]):
            return tuple(int(p) for p in parts if p.isdigit())
    return None


def parse_helpformat(text: str) -> tuple[str, ...]:
    """`sacct --helpformat` -> its field names in order (the list differs between Slurm versions)."""
    return tuple(dict.fromkeys(w for w in text.split() if w.replace("_", "").isalnum()))


def job_view(job: Mapping[str, Any]) -> dict[str, str]:
    """The slurmctld fields easlurm reads from one job of `squeue/scontrol --json`, under scontrol's names."""
    state, flags = job_state(job.get("job_state"))
    return {
        "JobId": str(integer(job.get("job_id"))),
        "JobState": state,
        "StateFlags": ",".join(flags),
        "AdminComment": str(job.get("admin_comment") or ""),
        "Restarts": str(integer(job.get("restart_cnt"))),
    }


class SlurmClient(ABC):
    """What easlurm needs from Slurm. Implementations: `CliSlurmClient` (tested on the local cluster);
    a pyslurm backend can implement the same methods where pyslurm binds to the installed Slurm."""

    @abstractmethod
    def sacct(self, selection: Sequence[str], fields: Sequence[str]) -> list[dict[str, str]]:
        """Rows (job, and step rows unless `-X` is in selection) with the named fields, as sacct prints them."""

    @abstractmethod
    def sacct_json(self, selection: Sequence[str]) -> dict[str, Any]:
        """The `sacct --json` document for the selection."""

    @abstractmethod
    def sacct_fields(self) -> tuple[str, ...]:
        """The fields this Slurm's sacct knows (`sacct --helpformat`)."""

    @abstractmethod
    def show_job(self, job_id: int) -> dict[str, str]:
        """slurmctld's view of a pending/running/recent job (`scontrol show job`); SlurmError if unknown."""

    @abstractmethod
    def set_admin_comment(self, job_id: int, text: str) -> None:
        """Publish through slurmctld (`scontrol update`): works while the job is pending or running."""

    @abstractmethod
    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        """Write straight into the accounting database (`sacctmgr modify job`): for jobs that ended.
        The value is lowercased and quotes become backticks; slurmctld's own copy can overwrite it."""


class CliSlurmClient(SlurmClient):
    """The CLI implementation. `env` is the environment for Slurm commands (e.g. SLURM_CONF); with
    `debug`, each raw command and its output are passed to `echo` (the CLI prints them on stderr)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        debug: bool = False,
        echo: Callable[[str], None] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = 2,
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.debug = debug
        self.echo = echo or (lambda msg: log.info("%s", msg))
        self.timeout_s = timeout_s
        self.retries = retries
        self._version: tuple[int, ...] | None = None
        self._sacct_fields: tuple[str, ...] | None = None

    def slurm_version(self) -> tuple[int, ...] | None:
        """The installed Slurm's version, asked once (`scontrol --version`); None if unreadable."""
        if self._version is None:
            self._version = parse_version(self.run(["scontrol", "--version"])) or ()
        return self._version or None

    def run(
        self, argv: Sequence[str], retry: bool = False, extra_env: Mapping[str, str] | None = None
    ) -> str:
        """Run one Slurm command; SlurmError (with its stderr) if it fails, retried for transient errors.
        `extra_env` is added to the environment (e.g. an output format other users must not read in argv)."""
        attempts = 1 + (self.retries if retry else 0)
        env = {**self.env, **extra_env} if extra_env else self.env
        for attempt in range(attempts):
            if self.debug:
                self.echo(f"$ {shlex.join(argv)}")
            try:
                res = subprocess.run(
                    list(argv),
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=self.timeout_s,
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
            except FileNotFoundError as exc:
                raise SlurmError(f"{argv[0]}: command not found (is Slurm installed?)") from exc
            except subprocess.TimeoutExpired as exc:
                raise SlurmError(f"{shlex.join(argv)}: no answer within {self.timeout_s:g} s") from exc
            if self.debug:
                self.echo(
                    res.stdout.rstrip() + (f"\n[stderr] {res.stderr.rstrip()}" if res.stderr.strip() else "")
                )
            if res.returncode == 0:
                return res.stdout
            err = res.stderr.strip().replace("\n", "; ") or f"exit status {res.returncode}"
            if attempt + 1 < attempts and _transient(err):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise SlurmError(f"{argv[0]} failed: {err}{self._config_hint(err)}")
        raise AssertionError("unreachable")

    def _config_hint(self, err: str) -> str:
        """A hint where Slurm found no configuration at all (its DNS SRV fallback failed)."""
        if "configuration source" not in err:
            return ""
        conf = self.env.get("SLURM_CONF")
        if conf:
            return f" (SLURM_CONF={conf}: is that file readable and slurmctld reachable?)"
        return (
            " (no Slurm configuration: set SLURM_CONF to your slurm.conf;"
            ' for the local cluster: eval "$(scripts/slurm-box env)")'
        )

    def submit_batch(
        self, script: str, args: Sequence[str] = (), wait: bool = False, sbatch: Sequence[str] = ("sbatch",)
    ) -> tuple[str, int, str]:
        """sbatch a script: (job id, exit status, stderr). With `wait` (sbatch --wait) it returns once the job
        or array has ended, and a non-zero status only says a task failed: the id stays valid. SlurmError
        when Slurm accepted nothing."""
        argv = [*sbatch, "--parsable", *(["--wait"] if wait else []), *args, script]
        if self.debug:
            self.echo(f"$ {shlex.join(argv)}")
        try:
            res = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=self.env,
                timeout=None if wait else self.timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except OSError as exc:
            raise SlurmError(f"{argv[0]}: cannot run ({exc.strerror}); is Slurm installed?") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{shlex.join(argv)}: no answer within {self.timeout_s:g} s") from exc
        if self.debug:
            self.echo(
                res.stdout.rstrip() + (f"\n[stderr] {res.stderr.rstrip()}" if res.stderr.strip() else "")
            )
        out = res.stdout.strip()
        job_id = out.split(";")[0].splitlines()[0] if out else ""
        if not job_id:
            err = res.stderr.strip().replace("\n", "; ") or f"exit status {res.returncode}"
            raise SlurmError(f"{argv[0]} failed: {err}{self._config_hint(err)}")
        return job_id, res.returncode, res.stderr.strip()

    def sacct(self, selection: Sequence[str], fields: Sequence[str]) -> list[dict[str, str]]:
        argv = [
            "sacct",
            "-n",
            "-P",
            f"--delimiter={SACCT_DELIMITER}",
            f"--format={','.join(fields)}",
            *selection,
        ]
        return parse_sacct_parsable(self.run(argv, retry=True), fields)

    def sacct_json(self, selection: Sequence[str]) -> dict[str, Any]:
        text = self.run(["sacct", "--json", *selection], retry=True)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SlurmError(f"sacct --json: not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise SlurmError("sacct --json: unexpected document")
        return doc

    def sacct_fields(self) -> tuple[str, ...]:
        if self._sacct_fields is None:
            self._sacct_fields = parse_helpformat(self.run(["sacct", "--helpformat"], retry=True))
        return self._sacct_fields

    def show_job(self, job_id: int) -> dict[str, str]:
        # From JSON, never from `scontrol -o show job` text: a job name, comment or (26.05) submit line is
        # user text that can hold "Key=value" look-alikes. 22.05 has no `scontrol --json` and ignores
        # `squeue --json -j` (it prints the whole queue): there this one job's fields are read as framed
        # `squeue -O` text (squeue_text), the whole queue as JSON only if that read does not add up.
        job_id = int(job_id)
        version = self.slurm_version()
        if version is not None and version >= SCONTROL_JSON_SINCE:
            argv = ["scontrol", "--json", "show", "job", str(job_id)]
        else:
            try:
                return self._show_job_text(job_id)
            except SqueueTextError as exc:
                log.warning("job %d: squeue text read refused, reading the queue as JSON: %s", job_id, exc)
            argv = ["squeue", "--json"]
        jobs = load_document(self.run(argv, retry=True), " ".join(argv[:3])).get("jobs") or ()
        for job in jobs:
            if integer(job.get("job_id")) == job_id:
                return job_view(job)
        raise SlurmError(f"scontrol show job {job_id}: Invalid job id specified")

    def _show_job_text(self, job_id: int) -> dict[str, str]:
        """One job's `job_view` from `squeue -h -t all -j ID` framed text (SHOW_FIELDS)."""
        frame = Frame.draw()
        out = self.run(show_job_argv(job_id), retry=True, extra_env=frame.env(SHOW_FIELDS))
        job = show_job_fields(out, frame, job_id)
        if job is None:
            raise SlurmError(f"scontrol show job {job_id}: Invalid job id specified")
        return job_view(job)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        _check_value(text)
        self.run(["scontrol", "update", f"JobId={int(job_id)}", f"AdminComment={text}"], retry=True)

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        _check_value(text)
        self.run(
            [
                "sacctmgr",
                "-i",
                "modify",
                "job",
                "where",
                f"jobid={int(job_id)}",
                "set",
                f"AdminComment={text}",
            ],
            retry=True,
        )


def _transient(err: str) -> bool:
    """slurmctld busy or restarting: worth one more try."""
    low = err.lower()
    return any(s in low for s in ("timed out", "connection refused", "try again", "socket timed out", "busy"))


def _check_value(text: str) -> None:
    """AdminComment values must be ASCII without `|` or newlines (sacct -P does not escape them)."""
    if not text.isascii() or any(c in text for c in "|\n\r"):
        raise SlurmError("AdminComment value must be ASCII without '|' or newlines")
    if len(text) > 65_000:
        raise SlurmError(f"AdminComment value of {len(text)} chars exceeds the database column")
