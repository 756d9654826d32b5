"""Slurm's GRES and TRES notations -> GPU counts, types, shard counts and GPU indices, in every version.

GRES items appear as `gpu:h100:8(S:0-1)` (node configuration), `gpu:h100:2(IDX:0-1)` (allocation),
`gres:gpu:2` / `gres/gpu:a100:2` (a job's request: 22.05 and 24.11+), `shard:2(IDX:0)` (22.05) or
`shard:2(2/3,0/3,...)` (24.11+: used/total per GPU of the node, `-/3` on 26.05 for a GPU held whole).
TRES strings are `billing=12,cpu=12,mem=33600M,node=1,gres/gpu=4,gres/gpu:a100=4`. The daemon, the agent
and the trace readers all read these through this module. Malformed text raises ValueError naming it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_ITEM = re.compile(
    r"^(?:gres[:/])?(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?::(?P<type>[^:()=]+?))?(?:[:=](?P<count>\d+))?(?:\((?P<detail>.*)\))?$"
)
_IDX = re.compile(r"IDX:(?P<idx>[0-9,\-]+)")
_PER_GPU = re.compile(r"^(?:(?:\d+|-)/\d+)(?:,(?:\d+|-)/\d+)*$")
_SPLIT = re.compile(r",(?![^(]*\))")
#: Slurm prints sizes with binary suffixes; memory's bare unit is MiB.
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([KMGTP]?)$")


@dataclass(frozen=True)
class GresItem:
    """One GRES entry: name ("gpu", "shard"), type or None, count, and the text in its parentheses."""

    name: str
    type: str | None
    count: int
    detail: str = ""

    @property
    def indices(self) -> tuple[int, ...]:
        """GPU indices the entry holds: from "IDX:0-1,4", or, in the per-GPU "used/total" form of 24.11+,
        the GPUs with a non-zero count ("-" is a GPU held whole by another GRES); () when unknown."""
        return parse_idx(self.detail)


def split_items(text: str | None) -> list[str]:
    """A GRES list split at the commas outside parentheses."""
    return [i.strip() for i in _SPLIT.split(text or "") if i.strip()]


def parse_item(item: str) -> GresItem | None:
    """One GRES item, None when it is not `name[:type][:count|=count][(detail)]` or names no resource."""
    if item.startswith(("(", "N/A")) or item.lower() in ("(null)", "n/a", "none"):
        return None
    m = _ITEM.match(item.strip())
    if m is None:
        return None
    gtype, count = m.group("type"), m.group("count")
    if gtype is not None and gtype.isdigit() and count is None:
        gtype, count = None, gtype  # "gpu:2": a count, no type
    return GresItem(
        m.group("name").lower(), gtype, int(count) if count is not None else 1, m.group("detail") or ""
    )


def parse_gres(text: str | None, strict: bool = False) -> list[GresItem]:
    """Every item of a GRES list; with `strict`, an item that mentions a GPU but cannot be read raises."""
    out = []
    for raw in split_items(text):
        item = parse_item(raw)
        if item is None:
            if strict and "gpu" in raw:
                raise ValueError(f"GRES item {raw!r} is not gpu[:type][:count]")
            continue
        out.append(item)
    return out


def gpus_of_gres(text: str | None, strict: bool = False) -> tuple[int, str | None]:
    """(GPU count, type) of a GRES list: counts of all `gpu` items add up; the item with most GPUs names
    the type. (0, None) when there is none."""
    total = 0
    best: tuple[int, str | None] = (0, None)
    for item in parse_gres(text, strict):
        if item.name != "gpu":
            continue
        total += item.count
        if item.count > best[0] or (best[1] is None and item.type is not None and item.count == best[0]):
            best = (item.count, item.type)
    return total, best[1]


def shards_of_gres(text: str | None) -> tuple[int, tuple[int, ...]]:
    """(count, GPU indices) of the `shard` entry of a GRES list; (0, ()) when there is none. In a node's
    used GRES the count is not the number of shards in use on every version: use the indices there."""
    for item in parse_gres(text):
        if item.name == "shard":
            return item.count, item.indices
    return 0, ()


def gpu_indices(text: str | None) -> tuple[int, ...]:
    """GPU indices of the `gpu` entries of a GRES list ("gpu:h100:2(IDX:1-2)" -> (1, 2))."""
    out: list[int] = []
    for item in parse_gres(text):
        if item.name == "gpu":
            out.extend(item.indices)
    return tuple(out)


def parse_idx(detail: str) -> tuple[int, ...]:
    """GPU indices of a GRES detail: "IDX:0-1,4" (or any text holding it) -> (0, 1, 4); "2/3,0/3,-/3" ->
    (0,); "IDX:N/A", "S:0-1" or "" -> ()."""
    detail = detail or ""
    m = _IDX.search(detail)
    if m is not None:
        out: list[int] = []
        for part in m.group("idx").split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit() and (not hi or hi.isdigit()):
                out.extend(range(int(lo), int(hi or lo) + 1))
        return tuple(out)
    if _PER_GPU.match(detail.strip()):
        used = [p.split("/")[0] for p in detail.strip().split(",")]
        return tuple(i for i, u in enumerate(used) if u.isdigit() and int(u) > 0)
    return ()


def parse_tres(text: str | None) -> dict[str, float]:
    """'billing=12,cpu=12,mem=33600M,node=1,gres/gpu:a100=4' -> {'cpu': 12.0, 'mem': bytes, ...}.

    Memory becomes bytes (bare numbers are MiB, as Slurm prints them); other counts keep Slurm's binary
    suffixes (rare). Empty or None gives {}. A malformed item raises ValueError naming it. A trace repeats
    a few TRES strings over its jobs: each is parsed once (a fresh dict each call)."""
    return dict(_tres_items(text))


@functools.lru_cache(maxsize=4096)
def _tres_items(text: str | None) -> tuple[tuple[str, float], ...]:
    """parse_tres's items, in order (cached; a ValueError is raised again on each call)."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, raw = item.partition("=")
        m = _VALUE.match(raw.strip())
        if not sep or not key or not m:
            raise ValueError(f"TRES item {item!r} is not name=number")
        value = float(m.group(1))
        value *= _SUFFIX[m.group(2) or "M"] if key == "mem" else _SUFFIX[m.group(2)]
        out[key] = value
    return tuple(out.items())


def gpus_from_tres(tres: dict[str, float]) -> tuple[int, str | None]:
    """GPU count and type from parsed TRES: `gres/gpu=N` is the total (else the typed entries add up); the
    typed entry with most GPUs names the type."""
    typed = {k.split(":", 1)[1]: v for k, v in tres.items() if k.startswith("gres/gpu:")}
    total = tres.get("gres/gpu")
    if total is None:
        total = sum(typed.values())
    gpu_type = max(typed, key=lambda k: typed[k]) if typed else None
    return round(total), gpu_type


def gpus_of_tres(text: str | None) -> tuple[int, str | None]:
    """`gpus_from_tres(parse_tres(text))`, (0, None) for text that is not TRES (the daemon's tolerant read)."""
    try:
        return gpus_from_tres(parse_tres(text))
    except ValueError:
        return 0, None


__all__ = [
    "GresItem",
    "gpu_indices",
    "gpus_from_tres",
    "gpus_of_gres",
    "gpus_of_tres",
    "parse_gres",
    "parse_idx",
    "parse_item",
    "parse_tres",
    "shards_of_gres",
    "split_items",
]


def request_prefix(request: str) -> str:
    """The prefix a job's GRES request carries (`gres:` on 22.05, `gres/` on 24.11+), so that an update
    speaks the version's own form: 22.05 accepts `gres/gpu:h100:1` but ignores it (the job keeps its old
    request), and refuses a typed `gres:gpu:h100:1` for a job that asked for untyped GPUs."""
    return "gres/" if request.startswith("gres/") else "gres:"
