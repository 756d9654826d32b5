"""`sacct -P` job rows read column by column: the same SacctJobs as `job_of_fields`, for a block of rows at once.

A dump of a million jobs repeats a few values per column (states, partitions, TRES, time limits, node
counts): each distinct value (or tuple of values, where `job_of_fields` reads fields together) is read
once, by the very functions the row reader calls, and the result handed to every row holding it.
Timestamps, nearly all distinct, are read as one array (`timestamps_s`). A row this reader cannot take
(an id that is not a plain job id, a value a parser refuses) comes back as None: its caller reads it with
`job_of_fields`, which names the field of a bad value as it always has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

import numpy as np

from easlurm.frozen import builder
from easlurm.slurm.sacct_jobs import (
    SacctJob,
    _count,
    _Row,
    _row_allocated,
    _row_cpus,
    _row_durations,
    _row_exit_code,
    _row_gpus,
    _row_state_word,
)
from easlurm.slurm.times import parse_timestamp_s

#: a value a parser refused: the rows holding it are read one by one
_BAD: Any = object()
#: YYYY-MM-DDTHH:MM:SS, the timestamp sacct prints: its length, separators and digit positions
_STAMP_LEN = 19
_SEPARATORS = ((4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"))
_DIGITS = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18)
#: the fields `job_of_fields` reads
_READ = frozenset(
    {"jobid", "jobidraw", "submit", "start", "end", "elapsed", "elapsedraw", "timelimit", "timelimitraw"}
    | {"alloctres", "reqtres", "allocgres", "reqgres", "trespernode", "tresperjob", "state", "exitcode"}
    | {"ncpus", "alloccpus", "nnodes", "nodelist", "user", "uid", "jobname", "account", "partition", "qos"}
    | {"comment", "admincomment"}
)
#: fields read together by one of the row reader's functions
_DURATIONS = ("timelimitraw", "timelimit")
_GPUS = ("alloctres", "reqtres", "allocgres", "reqgres", "trespernode", "tresperjob")
_CPUS = ("ncpus", "alloccpus")


def plain_id(value: str) -> bool:
    """A job's own id (digits only): no step, array task or het part to read."""
    return value.isdecimal() and value.isascii()


def jobs_of_columns(
    rows: Sequence[Sequence[str]],
    index: Mapping[str, int],
    names: Mapping[str, str],
    *,
    tz: tzinfo | None = None,
) -> list[SacctJob | None]:
    """The SacctJob of each row (its fields in the header's order, `index`: lower-case name -> position,
    `names`: lower-case name -> as the dump writes it), as `job_of_fields` reads it strictly; None for a
    row whose ids are not plain job ids or that holds a value a parser refuses."""
    if not rows:
        return []
    n = len(rows)
    cols = {name: [row[i].strip() for row in rows] for name, i in index.items() if name in _READ}
    raw = cols.get("jobidraw") or cols["jobid"]
    bad = {i for i, v in enumerate(raw) if not plain_id(v)}
    if "jobid" in cols and "jobidraw" in cols:
        bad.update(i for i, v in enumerate(cols["jobid"]) if not plain_id(v))
    submit, start, end = (timestamps_s(cols.get(c) or [""] * n, tz, bad) for c in ("submit", "start", "end"))
    elapsed = _elapsed(cols, n, bad)
    limit = _together(cols, names, _DURATIONS, lambda r: _row_durations(r)[1], bad)
    gpus = _together(cols, names, _GPUS, _row_gpus, bad)
    state = _together(cols, names, ("state",), _row_state_word, bad)
    code = _together(cols, names, ("exitcode",), _row_exit_code, bad)
    cpus = _together(cols, names, _CPUS, _row_cpus, bad)
    nodes = _together(cols, names, ("nnodes",), lambda r: r.read("nnodes", _count), bad)
    allocated = _allocated(cols, names, [s[0] if s else None for s in state], bad)
    user = [u or i or None for u, i in zip(cols.get("user") or [""] * n, cols.get("uid") or [""] * n)]
    text = {c: [v or None for v in cols[c]] if c in cols else [None] * n for c in _TEXT}
    nodelist: Sequence[str | None] = cols.get("nodelist") or [None] * n
    out: list[SacctJob | None] = [None] * n
    for i in range(n):
        if i in bad:
            continue
        alloc, req, n_gpus, gpu_type = gpus[i]
        out[i] = _sacct_job(
            job_id=raw[i],
            name=text["jobname"][i],
            user=user[i],
            account=text["account"][i],
            partition=text["partition"][i],
            qos=text["qos"][i],
            state=state[i][0],
            cancelled_by=state[i][1],
            exit_code=code[i],
            submit_s=submit[i],
            start_s=start[i],
            end_s=end[i],
            elapsed_s=elapsed[i],
            timelimit_s=limit[i],
            n_nodes=nodes[i],
            n_cpus=cpus[i],
            nodelist=nodelist[i],
            allocated=allocated[i],
            alloc_tres=dict(alloc),  # each job its own dict, as the row reader gives
            req_tres=dict(req),
            n_gpus=n_gpus,
            gpu_type=gpu_type,
            comment=text["comment"][i],
            admin_comment=text["admincomment"][i],
        )
    return out


#: SacctJob(**values) without its frozen __init__ (7.5 us a job, against 1.5 us)
_sacct_job = builder(SacctJob)


#: free-text fields handed on as they are (None when empty)
_TEXT = ("jobname", "account", "partition", "qos", "comment", "admincomment")


def _together(
    cols: Mapping[str, list[str]],
    names: Mapping[str, str],
    fields: Sequence[str],
    fn: Callable[[_Row], Any],
    bad: set[int],
) -> list[Any]:
    """`fn` of each row's `fields` (those the dump has), read once per distinct tuple of values; the rows
    where `fn` raises are added to `bad`."""
    present = [f for f in fields if f in cols]
    n = len(next(iter(cols.values())))
    keys: list[tuple[str, ...]] = list(zip(*(cols[f] for f in present))) if present else [()] * n
    memo: dict[tuple[str, ...], Any] = {}
    refused = set()
    for key in set(keys):
        try:
            memo[key] = fn(_Row(dict(zip(present, key)), True, names))
        except (ValueError, OverflowError):
            memo[key] = None
            refused.add(key)
    if refused:
        bad.update(i for i, key in enumerate(keys) if key in refused)
    return list(map(memo.__getitem__, keys))


def _allocated(
    cols: Mapping[str, list[str]], names: Mapping[str, str], state: list[Any], bad: set[int]
) -> list[Any]:
    """`_row_allocated` of each row: NodeList where the dump has it, else AllocTRES and the state."""
    if "nodelist" in cols:
        return _together(cols, names, ("nodelist",), lambda r: _row_allocated(r, None), bad)
    if "alloctres" not in cols:
        return [None] * len(state)
    return [False if not tres and st == "CANCELLED" else None for tres, st in zip(cols["alloctres"], state)]


def _elapsed(cols: Mapping[str, list[str]], n: int, bad: set[int]) -> list[Any]:
    """The row reader's run time: ElapsedRaw as a number where it is given, else Elapsed (clock text)."""
    raw = cols.get("elapsedraw") or [""] * n
    clock = cols.get("elapsed")
    memo: dict[tuple[str, str], Any] = {}
    out: list[Any] = []
    for i, value in enumerate(raw):
        if value and value.isascii() and value.isdigit():
            out.append(float(value))
            continue
        key = (value, clock[i] if clock is not None else "")
        if key not in memo:
            row = {"elapsedraw": value}
            if clock is not None:
                row["elapsed"] = key[1]
            try:
                memo[key] = _row_durations(_Row(row, True, {}))[0]
            except (ValueError, OverflowError):
                memo[key] = _BAD
        if memo[key] is _BAD:
            bad.add(i)
        out.append(memo[key])
    return out


def timestamps_s(values: Sequence[str], tz: tzinfo | None = None, bad: set[int] | None = None) -> list[Any]:
    """`parse_timestamp_s(v, tz)` of each (stripped) value; where it raises, None and the position added
    to `bad`. Values of sacct's own form YYYY-MM-DDTHH:MM:SS are read as one array, each distinct hour's
    zone offset asked once (where the offset changes within the hour, its values are read one by one);
    others one by one."""
    out: list[Any] = [None] * len(values)
    arr = np.array(values, dtype=str) if values else np.zeros(0, dtype="U1")
    shaped = np.char.str_len(arr) == _STAMP_LEN
    pos = np.flatnonzero(shaped)
    one_by_one = np.flatnonzero(~shaped).tolist()
    if len(pos):
        codes = arr[pos].astype(f"U{_STAMP_LEN}").view(np.uint32).reshape(-1, _STAMP_LEN)
        naive, good = _naive_epochs(codes)
        one_by_one += pos[~good].tolist()
        pos = pos[good]
        epochs = _localized(naive[good], tz)
        out_of_hour = np.isnan(epochs)
        one_by_one += pos[out_of_hour].tolist()
        for i, e in zip(pos[~out_of_hour].tolist(), epochs[~out_of_hour].tolist()):
            out[i] = e
    for i in one_by_one:
        try:
            out[i] = parse_timestamp_s(values[i], tz)
        except (
            ValueError,
            OverflowError,
        ):  # the row reader says which (OverflowError: a year it cannot place)
            if bad is not None:
                bad.add(i)
    return out


def _naive_epochs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seconds since 1970-01-01T00:00:00 of each row of code points read as a UTC clock, which rows are
    a real date and time in sacct's form: digits, separators, month 1-12, the month's days, 00:00:00 to
    23:59:59, years 1971-9998: others are read one by one)."""
    good = np.ones(len(codes), dtype=bool)
    for at, sep in _SEPARATORS:
        good &= codes[:, at] == ord(sep)
    digits = codes[:, list(_DIGITS)].astype(np.int64) - ord("0")
    good &= ((digits >= 0) & (digits <= 9)).all(axis=1)
    digits = np.where(good[:, None], digits, 0)
    year = digits[:, 0] * 1000 + digits[:, 1] * 100 + digits[:, 2] * 10 + digits[:, 3]
    month, day, hour, minute, second = (digits[:, k] * 10 + digits[:, k + 1] for k in (4, 6, 8, 10, 12))
    good &= (year >= 1971) & (year <= 9998) & (month >= 1) & (month <= 12) & (day >= 1)
    good &= (hour <= 23) & (minute <= 59) & (second <= 59)
    months = (year - 1970) * 12 + np.clip(month, 1, 12) - 1
    first = months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    following = (months + 1).astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    good &= day <= following - first
    naive = (first + day - 1) * 86400 + hour * 3600 + minute * 60 + second
    return naive, good


def _localized(naive: np.ndarray, tz: tzinfo | None) -> np.ndarray:
    """Epoch seconds of naive clock readings in `tz` (None: this process's zone), as `parse_timestamp_s`
    reads them: the offset of each distinct hour, where it is the same at its first and last second
    (NaN where not)."""
    hours, inverse = np.unique(naive // 3600, return_inverse=True)
    offsets = np.empty(len(hours), dtype=np.float64)
    for k, h in enumerate(hours.tolist()):
        lo, hi = _offset_s(h * 3600, tz), _offset_s(h * 3600 + 3599, tz)
        offsets[k] = lo if lo == hi else np.nan
    return naive - offsets[inverse]


def _offset_s(naive_s: int, tz: tzinfo | None) -> float:
    """The clock reading minus the epoch `parse_timestamp_s` gives for it."""
    dt = datetime.fromtimestamp(naive_s, UTC).replace(tzinfo=None)
    return naive_s - (dt.replace(tzinfo=tz) if tz is not None else dt).timestamp()


__all__ = ["jobs_of_columns", "plain_id", "timestamps_s"]
