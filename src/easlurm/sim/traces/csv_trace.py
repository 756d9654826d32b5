"""Streaming reader for the minimal CSV trace: submit, duration, gpus[, gpu_type, user, ...].

Required columns: `submit` (seconds or an ISO timestamp), `duration` (seconds or '2h', '1-02:00:00'),
`gpus`. Optional: `gpu_type`, `user`, `job_id`, `partition`, `model` (a zoo name), `timelimit`,
`start` (recorded start, for the baseline; else start = submit), `energy_j` (measured energy, all
devices) and `gpu_energy_j` (its GPU part, used to calibrate the oracle).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from easlurm.errors import ConfigError, TraceError
from easlurm.inputs import csv_header
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sane import problem
from easlurm.sim.traces.source import open_text
from easlurm.slurm.times import parse_timelimit_s, parse_timestamp_s
from easlurm.units import parse_duration_s

REQUIRED = ("submit", "duration", "gpus")
OPTIONAL = (
    "gpu_type",
    "user",
    "job_id",
    "partition",
    "model",
    "timelimit",
    "start",
    "energy_j",
    "gpu_energy_j",
)


def _time_s(text: str) -> float | None:
    """Seconds (relative, 0 allowed) or an ISO timestamp."""
    try:
        return float(text)
    except ValueError:
        return parse_timestamp_s(text)


class CsvReader:
    """Iterate the jobs of a minimal CSV trace."""

    def __init__(self, path: str | Path, *, skip_bad: bool = False, stats: TraceStats | None = None) -> None:
        self.path = str(path)
        self.skip_bad = skip_bad
        self.stats = stats if stats is not None else TraceStats()
        self.stats.path = self.path

    def __iter__(self) -> Iterator[TraceJob]:
        with open_text(self.path) as fh:
            reader = csv.reader(fh)
            header: list[str] | None = None
            for fields in reader:
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue
                if fields[0].lstrip().startswith("#"):
                    continue
                if header is None:
                    where = f"{self.path}:{reader.line_num}"
                    header = [h.lower() for h in csv_header(fields, where, TraceError)]  # BOM, duplicates
                    missing = [c for c in REQUIRED if c not in header]
                    if missing:
                        raise TraceError(
                            f"{self.path}:{reader.line_num}: CSV header lacks {', '.join(missing)} "
                            f"(needs {', '.join(REQUIRED)}; optional {', '.join(OPTIONAL)})"
                        )
                    self.stats.missing_fields.update(c for c in OPTIONAL if c not in header)
                    continue
                if [f.strip().lower() for f in fields] == header:
                    self.stats.repeated_headers += 1  # concatenated files: not a record, not a job
                    continue
                self.stats.rows += 1
                where = f"{self.path}:{reader.line_num}"
                if len(fields) != len(header):
                    self.stats.bad(
                        f"{where}: has {len(fields)} fields, header has {len(header)}", self.skip_bad
                    )
                    continue
                row = {k: v.strip() for k, v in zip(header, fields)}
                try:
                    job = self._parse(row, where, self.stats.rows)
                    why = problem(job)
                    if why:
                        raise TraceError(why)
                except TraceError as exc:
                    self.stats.bad(f"{where}: {exc}", self.skip_bad)
                    continue
                self.stats.jobs += 1
                yield job

    @staticmethod
    def _parse(row: dict[str, str], where: str, n: int) -> TraceJob:
        def parse(name: str, fn, *args):  # type: ignore[no-untyped-def]
            if len(row[name]) > 64:
                raise TraceError(f"field {name}: {len(row[name])} characters, not a value")
            try:
                return fn(row[name], *args)
            except (TraceError, ConfigError, ValueError, OverflowError) as exc:
                raise TraceError(f"field {name}: {exc}") from None

        submit_s = parse("submit", _time_s)
        if submit_s is None:
            raise TraceError(f"field submit: missing ({row['submit']!r})")
        duration_s = parse("duration", parse_duration_s)
        gpus = parse("gpus", int)
        if gpus < 0:
            raise TraceError(f"field gpus: negative ({gpus})")
        start_s = parse("start", _time_s) if row.get("start") else submit_s
        energy = parse("energy_j", float) if row.get("energy_j") else None
        gpu_energy = parse("gpu_energy_j", float) if row.get("gpu_energy_j") else None
        limit = parse("timelimit", parse_timelimit_s) if row.get("timelimit") else None
        return TraceJob(
            job_id=row.get("job_id") or str(n),
            submit_s=submit_s,
            user=row.get("user") or None,
            partition=row.get("partition") or None,
            start_s=start_s,
            end_s=start_s + duration_s,
            runtime_s=duration_s,
            timelimit_s=limit,
            n_gpus=gpus,
            gpu_type=row.get("gpu_type") or None,
            state="COMPLETED",
            model=row.get("model") or None,
            measured_energy_j=energy,
            measured_gpu_energy_j=gpu_energy,
            source=where,
        )
