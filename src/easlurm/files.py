"""Reading input files and writing outputs, each failure one line naming the file (and the option)."""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from easlurm import inputs
from easlurm.errors import ConfigError, EaslurmError

#: what a corrupt or truncated '.gz' raises while it is being read
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def decode_error(path: str | Path, exc: UnicodeDecodeError, what: str = "file") -> str:
    """The one line for a file that is not UTF-8 text (a binary file, another encoding)."""
    return f"{path}: {what} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"


def read_text(
    path: str | Path, what: str = "file", error: type[EaslurmError] = ConfigError, limit: int | None = None
) -> str:
    """A whole UTF-8 text file (a BOM dropped); a missing, unreadable, undecodable or non-regular file (a FIFO,
    a directory), or one over `limit` bytes, raises `error` naming it (easlurm.inputs)."""
    return inputs.read_text(path, what, error, limit)


@contextlib.contextmanager
def reading(path: str | Path, what: str = "file", error: type[EaslurmError] = ConfigError) -> Iterator[None]:
    """Around code that streams a text file: decoding and '.gz' errors become one line naming it."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise error(decode_error(path, exc, what)) from exc
    except GZIP_ERRORS as exc:
        raise error(f"{path}: corrupt or truncated gzip data ({exc or type(exc).__name__})") from exc


def check_writable(path: str | Path, option: str, directory: bool = False) -> Path:
    """Refuse, before any work, an output that cannot be created: `option PATH: why`. Writability is tried
    (a temporary file created and removed in the directory that will hold it), not guessed with os.access,
    which says yes under /proc and on a read-only mount for root."""
    p = Path(path)
    if p.exists():
        if directory and not p.is_dir():
            raise ConfigError(f"{option} {p}: not a directory")
        if not directory and p.is_dir():
            raise ConfigError(f"{option} {p}: is a directory")
        if not directory and not p.is_file() and not p.absolute().parent.resolve().is_relative_to("/proc"):
            return p  # a stream the user chose (/dev/stdout, /dev/null, a FIFO): written in place
        inputs.check_output_dir(p if directory else p.absolute().parent, f"{option} {p}")
        return p
    parent = next((a for a in p.absolute().parents if a.exists()), Path("/"))
    if not parent.is_dir():
        raise ConfigError(f"{option} {p}: cannot create it ({parent} is not a directory)")
    inputs.check_output_dir(parent, f"{option} {p}")
    return p


@contextlib.contextmanager
def atomic_writer(
    path: str | Path, option: str | None = None, newline: str | None = None
) -> Iterator[IO[str]]:
    """A text handle on a temporary file beside `path`, renamed onto it when the block ends without error
    and removed when it fails: a reader never sees a half-written file, a failure leaves nothing behind.
    An existing stream the user chose (/dev/null, /dev/stdout, a FIFO) is written in place: renaming onto it
    would replace the device node itself (as root, /dev/null became a regular file)."""
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        try:
            with open(p, "w", encoding="utf-8", newline=newline) as stream:
                yield stream
        except OSError as exc:
            where = f"{option} {p}" if option else str(p)
            raise ConfigError(f"{where}: cannot write ({exc.strerror or exc})") from exc
        return
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline=newline) as fh:
            yield fh
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        where = f"{option} {p}" if option else str(p)
        raise ConfigError(f"{where}: cannot write ({exc.strerror or exc})") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str, option: str | None = None) -> None:
    """Write a whole text file through atomic_writer."""
    with atomic_writer(path, option) as fh:
        fh.write(text)
