"""Slurm TRES and GRES strings -> numbers, and the GPU count and type they request or allocate."""

from __future__ import annotations

import re

from easlurm.errors import TraceError

#: Slurm prints sizes with binary suffixes; memory's bare unit is MiB.
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([KMGTP]?)$")
_GRES_ITEM = re.compile(r"^(?:gres[:/])?gpu(?::([^:(=]+))?(?::(\d+))?(?:\(.*\))?$")


def parse_tres(text: str | None) -> dict[str, float]:
    """'billing=12,cpu=12,mem=33600M,node=1,gres/gpu:a100=4' -> {'cpu': 12.0, 'mem': bytes, ...}.

    Memory becomes bytes (bare numbers are MiB, as Slurm prints them); other counts keep Slurm's
    binary suffixes (rare). Empty or None gives {}. A malformed item raises TraceError naming it.
    """
    out: dict[str, float] = {}
    if not text:
        return out
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, raw = item.partition("=")
        m = _VALUE.match(raw.strip())
        if not sep or not key or not m:
            raise TraceError(f"TRES item {item!r} is not name=number")
        value = float(m.group(1))
        if key == "mem":
            value *= _SUFFIX[m.group(2) or "M"]
        else:
            value *= _SUFFIX[m.group(2)]
        out[key] = value
    return out


def gpus_from_tres(tres: dict[str, float]) -> tuple[int, str | None]:
    """GPU count and type from parsed TRES: the typed entry with most GPUs names the type.

    `gres/gpu=N` is the total; when only typed entries exist their sum is the total.
    """
    typed = {k.split(":", 1)[1]: v for k, v in tres.items() if k.startswith("gres/gpu:")}
    total = tres.get("gres/gpu")
    if total is None:
        total = sum(typed.values())
    gpu_type = max(typed, key=lambda k: typed[k]) if typed else None
    return round(total), gpu_type


def gpus_from_gres(text: str | None) -> tuple[int, str | None]:
    """Older GRES columns (AllocGRES, ReqGRES, TresPerNode): 'gpu:a100:4(IDX:0-3)', 'gres/gpu:2', 'gpu'."""
    if not text:
        return 0, None
    total = 0
    best: tuple[int, str | None] = (0, None)
    for item in re.split(r",(?![^(]*\))", text):
        item = item.strip()
        if not item or item.startswith(("(", "N/A")):
            continue
        m = _GRES_ITEM.match(item)
        if m is None:
            if "gpu" in item:
                raise TraceError(f"GRES item {item!r} is not gpu[:type][:count]")
            continue
        gtype, count = m.group(1), m.group(2)
        if gtype is not None and gtype.isdigit() and count is None:
            gtype, count = None, gtype
        n = int(count) if count is not None else 1
        total += n
        if n > best[0]:
            best = (n, gtype)
    return total, best[1]
