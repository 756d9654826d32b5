"""Open a trace file as text (plain or gzip) and name positions in it for error messages."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TextIO, cast

from easlurm.errors import TraceError
from easlurm.inputs import MAX_INFLATE_RATIO, MIB

#: What a damaged gzip stream raises while it is read: a truncated file ends with EOFError, which
#: click would otherwise take for Ctrl-D/Ctrl-C ("aborted", exit 130).
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


class _GzipText:
    """A gzip text stream whose decompression errors become TraceError naming the file and line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")  # noqa: SIM115 - closed by close()
        self._lines = 0
        # a trace is streamed, so only the ratio is capped (no absolute size): text CSV and sacct dumps
        # compress 5-20x, a gzip bomb thousands of times
        self._inflated = 0
        self._most = MIB + path.stat().st_size * MAX_INFLATE_RATIO

    def _fail(self, exc: Exception) -> TraceError:
        what = "truncated" if isinstance(exc, EOFError) else f"corrupt ({exc})"
        return TraceError(
            f"{self.path}:{self._lines + 1}: gzip archive {what} (the file is incomplete: copy or download it again)"
        )

    def __iter__(self) -> Iterator[str]:
        while True:
            line = self.readline()
            if not line:
                return
            yield line

    def readline(self, size: int = -1) -> str:
        try:
            line = self._fh.readline(size if size >= 0 else self._most - self._inflated + 1)
        except _GZIP_ERRORS as exc:
            raise self._fail(exc) from exc
        if line.endswith("\n"):
            self._lines += 1
        self._count(len(line))
        return line

    def read(self, size: int = -1) -> str:
        try:
            data = self._fh.read(size)
        except _GZIP_ERRORS as exc:
            raise self._fail(exc) from exc
        self._lines += data.count("\n")
        self._count(len(data))
        return data

    def _count(self, chars: int) -> None:
        self._inflated += chars
        if self._inflated > self._most:
            raise TraceError(
                f"{self.path}:{self._lines + 1}: gzip archive inflates more than {MAX_INFLATE_RATIO}x its "
                "size: refused (a trace compresses 5-20x)"
            )

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> _GzipText:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_text(path: str | Path) -> TextIO:
    """Open for streaming text reading; '.gz' files are decompressed on the fly (damage is a TraceError)."""
    p = Path(path)
    try:
        if p.suffix == ".gz":
            return cast(TextIO, _GzipText(p))
        return p.open("r", encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read trace ({exc.strerror})") from exc


def strip_suffixes(path: str | Path) -> str:
    """'x.sacct.json.gz' -> '.json': the suffix that names the format."""
    p = Path(path)
    return (p.with_suffix("").suffix if p.suffix == ".gz" else p.suffix).lower()
