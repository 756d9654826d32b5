"""Known shapes of sacct columns, and the placement of a row whose free-text fields hold the delimiter.

sacct does not escape its delimiter: a JobName `Job| Name003` or Constraints `cpu-a|cpu-b|gpu` make
a row longer than the header. Only free-text columns can hold the delimiter; every other column has
a shape (timestamp, state, TRES, id, number, size, duration, word). `place_fields` tries every way of
giving the extra fields back to free-text columns and keeps the placements in which every shaped
column matches; a row is accepted only when all such placements agree on the columns the reader uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: Columns whose text is free (may hold the delimiter or newlines).
FREE_TEXT = frozenset(
    {
        "submitline",
        "comment",
        "admincomment",
        "systemcomment",
        "jobname",
        "workdir",
        "constraints",
        "container",
        "wckey",
        "licenses",
        "extra",
        "stdout",
        "stderr",
        "stdin",
        "reason",
    }
)

_MISSING = r"|unknown|none|n/a|\(null\)|invalid|"
_TS = re.compile(rf"^(?:\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.+-][\d:]+)?|\d+(?:\.\d+)?{_MISSING})$", re.I)
_INT = re.compile(r"^(?:-?\d+|)$")
_NUM = re.compile(r"^(?:-?\d+(?:\.\d+)?[KMGTP]?|unknown|)$", re.I)
_SIZE = re.compile(r"^(?:\d+(?:\.\d+)?[KMGTPE]?[nc]?|)$")
_DUR = re.compile(
    r"^(?:(?:\d+-)?(?:\d+:)?\d+:\d+(?:\.\d+)?|unlimited|partition_limit|infinite|invalid|unknown|none|)$",
    re.I,
)
_TLRAW = re.compile(r"^(?:\d+|unlimited|partition_limit|infinite|invalid|unknown|)$", re.I)
_STATE = re.compile(r"^(?:[A-Z_]+\+?(?: by -?\d+)?|)$")
_EXIT = re.compile(r"^(?:-?\d+:-?\d+|)$")
_TRES = re.compile(r"^(?:[A-Za-z0-9_/:.\-]+=[^,=\s]*(?:,[A-Za-z0-9_/:.\-]+=[^,=\s]*)*|)$")
_WORD = re.compile(r"^\S*$")
_NODES = re.compile(r"^(?:None assigned|\S*)$")
_CPUFREQ = re.compile(
    r"^(?:\d+(?:\.\d+)?[KMG]?|unknown|performance|powersave|userspace|ondemand|conservative|schedutil|low|medium|high|highm1|)$",
    re.I,
)
_LAYOUT = re.compile(
    r"^(?:unknown|block|cyclic|plane|arbitrary|[a-z:]*cyclic[a-z:]*|[a-z:]*block[a-z:]*|)$", re.I
)
_JOBID = re.compile(r"^(?:\d+(?:_(?:\d+|\[[^\]]*\]))?(?:\+\d+)?(?:\.[A-Za-z0-9_+-]+)?|jobid|jobidraw)$", re.I)


def _any(value: str) -> bool:
    return True


def _re(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda value: pattern.match(value.strip()) is not None


_SHAPES: dict[str, Callable[[str], bool]] = {}
for _names, _pat in (
    (("submit", "start", "end", "eligible", "submittime", "starttime", "endtime"), _TS),
    (("jobid", "jobidraw"), _JOBID),
    (("state",), _STATE),
    (("exitcode", "derivedexitcode"), _EXIT),
    (
        (
            "alloctres",
            "reqtres",
            "tresusageinave",
            "tresusageinmax",
            "tresusageinmaxnode",
            "tresusageinmaxtask",
            "tresusageinmin",
            "tresusageinminnode",
            "tresusageinmintask",
            "tresusageintot",
            "tresusageoutave",
            "tresusageoutmax",
            "tresusageoutmaxnode",
            "tresusageoutmaxtask",
            "tresusageoutmin",
            "tresusageoutminnode",
            "tresusageoutmintask",
            "tresusageouttot",
        ),
        _TRES,
    ),
    (
        (
            "alloccpus",
            "allocnodes",
            "associd",
            "cputimeraw",
            "consumedenergyraw",
            "dbindex",
            "elapsedraw",
            "gid",
            "ncpus",
            "nnodes",
            "ntasks",
            "priority",
            "qosraw",
            "reqcpus",
            "reqnodes",
            "resvcpuraw",
            "uid",
            "wckeyid",
            "reservationid",
            "maxdiskreadtask",
            "maxdiskwritetask",
            "maxpagestask",
            "maxrsstask",
            "maxvmsizetask",
            "mincputask",
            "arrayjobid",
            "arraytaskid",
            "hetjobid",
            "hetjoboffset",
        ),
        _INT,
    ),
    (
        (
            "avediskread",
            "avediskwrite",
            "avepages",
            "averss",
            "avevmsize",
            "maxdiskread",
            "maxdiskwrite",
            "maxpages",
            "maxrss",
            "maxvmsize",
            "reqmem",
            "consumedenergy",
        ),
        _SIZE,
    ),
    (("avecpufreq",), _NUM),
    (
        (
            "elapsed",
            "cputime",
            "reserved",
            "resvcpu",
            "suspended",
            "systemcpu",
            "timelimit",
            "totalcpu",
            "usercpu",
            "avecpu",
            "mincpu",
            "planned",
            "plannedcpu",
        ),
        _DUR,
    ),
    (("timelimitraw", "plannedcpuraw"), _TLRAW),
    (("reqcpufreq", "reqcpufreqmin", "reqcpufreqmax", "reqcpufreqgov"), _CPUFREQ),
    (("layout",), _LAYOUT),
    (
        (
            "nodelist",
            "maxdiskreadnode",
            "maxdiskwritenode",
            "maxpagesnode",
            "maxrssnode",
            "maxvmsizenode",
            "mincpunode",
        ),
        _NODES,
    ),
    (
        (
            "account",
            "cluster",
            "group",
            "user",
            "partition",
            "qos",
            "flags",
            "mcslabel",
            "reservation",
            "blockid",
        ),
        _WORD,
    ),
):
    for _n in _names:
        _SHAPES[_n] = _re(_pat)


def shape_of(column: str) -> Callable[[str], bool]:
    """The check a value of `column` (lower case) must pass; anything goes in unknown and free columns."""
    if column == "":
        return lambda value: value == ""  # the trailing delimiter of `sacct -p`
    if column in FREE_TEXT:
        return _any
    return _SHAPES.get(column, _any)


@dataclass(frozen=True)
class Misplaced:
    """Why a row could not be placed: the column where every placement failed, and its value there."""

    column: str
    value: str
    ambiguous: bool = False
    holds_delimiter: bool = False  # the delimiter is inside this shaped column (value: the whole of it)


def _shaped_holder(
    fields: Sequence[str], cols: Sequence[str], delimiter: str, checks: list[Any]
) -> Misplaced | None:
    """The shaped columns whose value, taking the extra fields, lets every other column fit (names
    joined by ' or ' when several could; the value is the first's); None when none can."""
    extra = len(fields) - len(cols)
    hits = []
    for j, col in enumerate(cols):
        if col in FREE_TEXT:
            continue
        pieces = fields[j : j + extra + 1]
        if not all(checks[j](p) for p in pieces):
            continue  # each piece of the split value must look like a value of the column
        values = [*fields[:j], delimiter.join(pieces), *fields[j + extra + 1 :]]
        if all(checks[i](v) for i, v in enumerate(values) if i != j):
            hits.append(Misplaced(col, values[j], holds_delimiter=True))
    if not hits:
        return None
    value = hits[0].value if len(hits) == 1 else ""
    return Misplaced(" or ".join(h.column for h in hits), value, holds_delimiter=True)


def place_fields(
    fields: Sequence[str],
    cols: Sequence[str],
    delimiter: str,
    used: frozenset[str],
    max_placements: int = 256,
    max_steps: int = 50_000,
) -> list[str] | Misplaced:
    """`fields` (more than `cols`) regrouped to one value per column, or why that is impossible.

    Extra fields go to free-text columns only; every shaped column must match. Placements that
    differ on a shaped column of `used` make the row ambiguous (refused). Otherwise the free values
    come from the placement that splits no free value on an empty piece, then the one that gives
    the extras to the earliest free column (SubmitLine before AdminComment in sacct's usual order).
    """
    ncols, extra = len(cols), len(fields) - len(cols)
    checks = [shape_of(c) for c in cols]
    free = [c in FREE_TEXT for c in cols]
    # free columns at or after column j: a placement must leave no extra beyond the last of them
    free_after = [0] * (ncols + 1)
    for j in range(ncols - 1, -1, -1):
        free_after[j] = free_after[j + 1] + (1 if free[j] else 0)
    found: list[list[str]] = []
    deepest: list[tuple[int, str]] = [(-1, "")]
    steps = [0]

    def walk(j: int, pos: int, left: int, acc: list[str]) -> None:
        steps[0] += 1
        if len(found) >= max_placements or steps[0] > max_steps:
            return
        if j == ncols:
            if left == 0:
                found.append(list(acc))
            return
        if left and not free_after[j]:
            return
        for w in range(left, -1, -1) if free[j] else (0,):
            value = delimiter.join(fields[pos : pos + w + 1])
            if not checks[j](value):
                if j > deepest[0][0]:
                    deepest[0] = (j, value)
                continue
            acc.append(value)
            walk(j + 1, pos + w + 1, left - w, acc)
            acc.pop()

    walk(0, 0, extra, [])
    if steps[0] > max_steps:  # too many ways to try (many delimiters among many free columns)
        return Misplaced(cols[max(deepest[0][0], 0)], deepest[0][1], ambiguous=True)
    if not found:
        holder = _shaped_holder(fields, cols, delimiter, checks)
        if holder is not None:
            return holder
        j, value = deepest[0]
        return Misplaced(cols[j] if 0 <= j < ncols else cols[-1], value)
    shaped = [i for i, c in enumerate(cols) if c in used and not free[i]]
    for other in found[1:]:
        for i in shaped:
            if other[i] != found[0][i]:
                return Misplaced(cols[i], found[0][i], ambiguous=True)

    def empty_pieces(p: list[str]) -> int:
        return sum(
            1
            for i, v in enumerate(p)
            if free[i] and delimiter in v and "" in (s.strip() for s in v.split(delimiter))
        )

    return min(found, key=empty_pieces)
