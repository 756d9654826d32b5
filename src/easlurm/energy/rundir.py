"""GC-Bench-style run directory: run.json (what ran, where, with which sensors), summary.json, samples CSV."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from easlurm.energy.sensor import SensorStatus
from easlurm.errors import ConfigError
from easlurm.files import check_writable, write_text_atomic

RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
SUMMARY_CSV = "summary.csv"
SAMPLES_FILE = "power_samples.csv"


def check_run_dir(path: str | Path) -> Path:
    """Validate before anything is written: the directory must be creatable and hold no earlier run."""
    p = Path(path)
    if (p / RUN_FILE).exists():
        raise ConfigError(f"{p}: already holds a run ({RUN_FILE}); choose another --out")
    return check_writable(p, "--out", directory=True)


def write_json(path: Path, doc: Any) -> None:
    """Atomic: a reader never sees a half-written file."""
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("easlurm", "numpy", "nvidia-ml-py", "mpi4py"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def run_document(
    command: list[str] | None,
    config: dict[str, Any],
    statuses: list[SensorStatus],
    start_time: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "command": command,
        "config": config,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start_time": start_time,
        "versions": versions(),
        "sensors": [
            {"name": s.name, "kind": s.kind, "source": s.source, "available": s.available, "detail": s.detail}
            for s in statuses
        ],
        **(extra or {}),
    }
