"""Open a trace file as text (plain or gzip) and name positions in it for error messages."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import TextIO

from easlurm.errors import TraceError


def open_text(path: str | Path) -> TextIO:
    """Open for streaming text reading; '.gz' files are decompressed on the fly."""
    p = Path(path)
    try:
        if p.suffix == ".gz":
            return gzip.open(p, "rt", encoding="utf-8", errors="replace", newline="")
        return p.open("r", encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read trace ({exc.strerror})") from exc


def strip_suffixes(path: str | Path) -> str:
    """'x.sacct.json.gz' -> '.json': the suffix that names the format."""
    p = Path(path)
    return (p.with_suffix("").suffix if p.suffix == ".gz" else p.suffix).lower()
