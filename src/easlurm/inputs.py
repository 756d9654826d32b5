"""The one validation layer at the boundary: every file and value a user hands easlurm is checked here,
before any work, and a bad one becomes one line naming the file (and line, key or field).

The rules, each with its limit stated:
  files      a regular file only (a FIFO, device or directory is refused: reading one hangs or fails late),
             at most `limit` bytes (16 MiB for configuration, plans, parameter files and catalogues)
  YAML       safe types only; a duplicate key, nesting deeper than 50, aliases expanding to more than
             10,000 nodes (an "anchor bomb") and a non-mapping top level where a mapping is expected are refused
  CSV        a UTF-8 BOM is accepted; duplicate headers are refused; numbers are finite and within bounds
  numbers    finite, in range, and integers really integral (2.5 GPUs is refused, never truncated)
  times      not negative, not after 2200-01-01 (a typo or a sentinel), an end not before its start
  inflating  compressed input may not inflate past 256 MiB or 200x its size
  outputs    writability is tried (a temporary file created and removed), /proc, /sys and /dev refused up front
  work       estimates (jobs x hours, a trace against its cluster, a campaign's runs) refused past a limit
"""

from __future__ import annotations

import math
import os
import stat
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from easlurm.errors import ConfigError, EaslurmError

MIB = 1 << 20
#: configuration, plans, parameter files, catalogues, job lists and clusters
MAX_YAML_BYTES = 16 * MIB
#: the deepest nesting of a YAML document (PyYAML's composer recurses: 1,000 levels is a RecursionError)
MAX_YAML_DEPTH = 50
#: the nodes aliases may add to a YAML document, counted as if every alias were expanded
MAX_ALIAS_NODES = 10_000
#: what compressed input may inflate to, in bytes and as a multiple of its compressed size
MAX_INFLATED_BYTES = 256 * MIB
MAX_INFLATE_RATIO = 200
#: 2200-01-01T00:00:00Z: a later epoch time is a typo or a sentinel (Slurm's "Unknown" is 2^32 - 2 ... 9999)
MAX_EPOCH_S = 7_258_118_400.0
#: the directories no output may go under: the kernel's, which accept a name check and fail at write time
PSEUDO_FS = ("/proc", "/sys", "/dev")

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB" if n >= MIB else f"{int(n)} bytes"


def regular_file(
    path: str | Path, what: str = "file", error: type[EaslurmError] = ConfigError, limit: int | None = None
) -> Path:
    """The path of a readable regular file of at most `limit` bytes; anything else raises `error` naming it."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise error(f"{p}: cannot read {what} ({exc.strerror or exc})") from exc
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise error(f"{p}: {what} is {kind}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise error(f"{p}: {what} is {_mib(st.st_size)}, over the {_mib(limit)} limit")
    return p


def read_bytes(
    path: str | Path, what: str = "file", error: type[EaslurmError] = ConfigError, limit: int | None = None
) -> bytes:
    """A whole regular file's bytes (regular_file's checks first)."""
    p = regular_file(path, what, error, limit)
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1 if limit is not None else -1)
    except OSError as exc:
        raise error(f"{p}: cannot read {what} ({exc.strerror or exc})") from exc
    if limit is not None and len(data) > limit:  # grew while read
        raise error(f"{p}: {what} is over the {_mib(limit)} limit")
    return data


def decode(data: bytes, path: str | Path, what: str = "file", error: type[EaslurmError] = ConfigError) -> str:
    """UTF-8 text, a leading BOM dropped; another encoding or a binary file raises `error` naming it."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise error(f"{path}: {what} is not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})") from exc


def read_text(
    path: str | Path, what: str = "file", error: type[EaslurmError] = ConfigError, limit: int | None = None
) -> str:
    """A whole regular UTF-8 text file (a BOM dropped) of at most `limit` bytes."""
    return decode(read_bytes(path, what, error, limit), path, what, error)


def inflate(
    data: bytes, where: str, error: type[EaslurmError] = ConfigError, wbits: int = zlib.MAX_WBITS
) -> bytes:
    """zlib (or, with wbits=31, gzip) data inflated under the cap: min(256 MiB, 200x the input, at least 1 MiB)."""
    cap = inflate_cap(len(data))
    engine = zlib.decompressobj(wbits)
    try:
        out = engine.decompress(data, cap + 1)
    except zlib.error as exc:
        raise error(f"{where}: corrupt compressed data ({exc})") from exc
    if len(out) > cap or engine.unconsumed_tail:
        raise error(
            f"{where}: compressed data inflates past {_mib(cap)} (more than {MAX_INFLATE_RATIO}x): refused"
        )
    return out


def inflate_cap(compressed: int) -> int:
    """The most bytes `compressed` bytes may inflate to."""
    return min(MAX_INFLATED_BYTES, max(MIB, compressed * MAX_INFLATE_RATIO))


# --- YAML


def load_yaml(text: str, source: str | Path, error: type[EaslurmError] = ConfigError) -> Any:
    """A YAML document under the rules above; an empty document is None. Errors name `source` and the line."""
    import yaml  # here: `scripts/slurm-box install` imports easlurm before PyYAML is installed

    loader = _loader_class(yaml)(text)
    try:
        return loader.get_single_data()
    except _YamlRefused as exc:
        raise error(f"{source}:{exc.line}: {exc.why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{source}{line}: invalid YAML ({problem})") from exc
    except RecursionError:
        raise error(f"{source}: YAML nested too deeply (at most {MAX_YAML_DEPTH} levels)") from None
    finally:
        loader.dispose()


def read_yaml(
    path: str | Path,
    what: str = "file",
    error: type[EaslurmError] = ConfigError,
    limit: int = MAX_YAML_BYTES,
) -> Any:
    """A YAML file read and loaded under the rules above."""
    return load_yaml(read_text(path, what, error, limit), path, error)


class _YamlRefused(Exception):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


_LOADERS: dict[int, Any] = {}


def _loader_class(yaml: Any) -> Any:
    """A SafeLoader that refuses duplicate keys, deep nesting and alias expansion past the budget."""
    if id(yaml) in _LOADERS:
        return _LOADERS[id(yaml)]

    class Loader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0
            self._sizes: dict[int, int] = {}
            self._aliased = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                node = super().compose_node(parent, index)
                self._aliased += self._sizes.get(id(node), 1)
                if self._aliased > MAX_ALIAS_NODES:
                    raise _YamlRefused(
                        event.start_mark.line + 1,
                        f"YAML aliases expand past {MAX_ALIAS_NODES} nodes (an anchor bomb?): refused",
                    )
                return node
            self._depth += 1
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _YamlRefused(mark.line + 1, f"YAML nested deeper than {MAX_YAML_DEPTH} levels: refused")
            try:
                node = super().compose_node(parent, index)
            finally:
                self._depth -= 1
            self._sizes[id(node)] = _node_size(node, self._sizes)
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base`: the merge's own keys give way to explicit ones, as YAML says
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise _YamlRefused(
                            line,
                            f"duplicate key {key!r} (first at line {seen[key]}; the last would silently win)",
                        )
                    seen[key] = line
                except TypeError:
                    continue  # an unhashable key: the base class names it
            return super().construct_mapping(node, deep=deep)

    _LOADERS[id(yaml)] = Loader
    return Loader


def _node_size(node: Any, sizes: Mapping[int, int]) -> int:
    value = node.value
    if isinstance(value, list):
        total = 1
        for item in value:
            for sub in item if isinstance(item, tuple) else (item,):
                total += sizes.get(id(sub), 1)
        return min(total, MAX_ALIAS_NODES * 1000)
    return 1


def mapping(
    doc: Any, source: str | Path, what: str = "top level", error: type[EaslurmError] = ConfigError
) -> dict[str, Any]:
    """`doc` when it is a mapping (None, an empty document, is {}); otherwise one line naming what was found."""
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        kind = {list: "a list", str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
        found = kind.get(type(doc), type(doc).__name__)
        raise error(f"{source}: {what} must be a mapping, got {found}")
    return dict(doc)


# --- numbers and times


def number(
    value: Any,
    where: str,
    lo: float | None = None,
    hi: float | None = None,
    integer: bool = False,
    error: type[EaslurmError] = ConfigError,
    lo_open: bool = False,
) -> float:
    """A finite number in [lo, hi] (lo excluded with lo_open), integral when `integer`; strings are parsed."""
    if isinstance(value, bool) or value is None:
        raise error(f"{where}: expected a number, got {value!r}")
    if isinstance(value, str):
        value = parse_float(value, where, error)
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise error(f"{where}: must be a finite number, got {value!r}")
    if integer and x != int(x):
        raise error(f"{where}: must be a whole number, got {value!r}")
    below = x <= lo if (lo is not None and lo_open) else (lo is not None and x < lo)
    if below or (hi is not None and x > hi):
        raise error(f"{where}: must be {_range(lo, hi, lo_open)}, got {value!r}")
    return x


def whole(
    value: Any,
    where: str,
    lo: int | None = None,
    hi: int | None = None,
    error: type[EaslurmError] = ConfigError,
) -> int:
    """An integer in [lo, hi]: 2.5 or "2.5" is refused, never truncated; 2.0 is 2."""
    return int(number(value, where, lo, hi, integer=True, error=error))


def _range(lo: float | None, hi: float | None, lo_open: bool) -> str:
    if lo is not None and hi is not None and not lo_open:
        return f"between {lo:g} and {hi:g}"
    parts = [
        f"{'>' if lo_open else '>='} {lo:g}" if lo is not None else "",
        f"<= {hi:g}" if hi is not None else "",
    ]
    return " and ".join(p for p in parts if p)


def parse_float(text: str, where: str, error: type[EaslurmError] = ConfigError) -> float:
    """A number typed as text: finite, without OverflowError (1e999 is inf, refused) or a 5,000-digit int."""
    s = text.strip()
    if len(s) > 64:
        raise error(f"{where}: number too long ({len(s)} characters)")
    try:
        x = float(s)
    except (ValueError, OverflowError):
        raise error(f"{where}: not a number: {text!r}") from None
    if not math.isfinite(x):
        raise error(f"{where}: must be a finite number, got {text!r}")
    return x


def epoch(value: float, where: str, error: type[EaslurmError] = ConfigError) -> float:
    """A time in s (since the epoch or a trace's start): finite, >= 0, before 2200."""
    if not (math.isfinite(value) and 0 <= value <= MAX_EPOCH_S):
        raise error(f"{where}: time must be >= 0 and before the year 2200, got {value!r}")
    return value


def interval(start: float, end: float, where: str, error: type[EaslurmError] = ConfigError) -> None:
    """An end not before its start (both already checked with `epoch`)."""
    if end < start:
        raise error(f"{where}: ends ({end:g}) before it starts ({start:g})")


# --- CSV


def csv_header(row: Sequence[str], source: str | Path, error: type[EaslurmError] = ConfigError) -> list[str]:
    """A CSV header, a leading BOM dropped and names stripped; a duplicated name is refused."""
    names = [c.strip() for c in row]
    if names:
        names[0] = names[0].lstrip("\ufeff")
    seen: set[str] = set()
    for name in names:
        if name and name in seen:
            raise error(f"{source}: duplicate column {name!r} in the header (which one holds the values?)")
        seen.add(name)
    return names


# --- outputs


def check_output_dir(directory: str | Path, label: str) -> None:
    """Refuse, by trying, a directory where an output cannot be created (create and remove a temporary file);
    /proc, /sys and /dev are refused up front. `directory` must exist (the nearest existing ancestor)."""
    d = Path(directory).absolute()
    resolved = d.resolve()
    for root in PSEUDO_FS:
        if resolved == Path(root) or Path(root) in resolved.parents:
            raise ConfigError(f"{label}: cannot write under {root} (a kernel file system)")
    try:
        fd, name = tempfile.mkstemp(prefix=".easlurm-probe-", dir=d)
    except OSError as exc:
        why = "permission denied" if exc.errno in (1, 13) else exc.strerror or str(exc)
        raise ConfigError(f"{label}: {why} (cannot write in {d})") from None
    os.close(fd)
    os.unlink(name)


# --- work


def check_work(
    amount: float, limit: float, what: str, hint: str, error: type[EaslurmError] = ConfigError
) -> None:
    """Refuse, before starting, work estimated past `limit`: `what` says what was counted, `hint` how to cut it."""
    if not math.isfinite(amount) or amount > limit:
        shown = f"{amount:,.0f}" if math.isfinite(amount) else "unbounded"
        raise error(f"{what} is {shown}, over the limit of {limit:,.0f}: {hint}")


def first_duplicate(names: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            return n
        seen.add(n)
    return None
