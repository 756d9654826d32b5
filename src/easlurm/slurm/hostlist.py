"""Slurm hostlist expressions ("a100-[1-2,05],cpu-1") -> node names."""

from __future__ import annotations

import re

_ITEM = re.compile(r"([A-Za-z0-9._-]*)(?:\[([0-9,\-]+)\])?([A-Za-z0-9._-]*)")
_SPLIT = re.compile(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*")
#: A hostlist longer than this is not a real node list (a typo such as "n[1-999999999]").
MAX_NAMES = 100_000


def expand_hostlist(text: str, limit: int = MAX_NAMES) -> list[str]:
    """Node names in order: 'a100-[1-2,5],cpu-1' -> a100-1, a100-2, a100-5, cpu-1 (one bracket group per
    name, zero padding kept). ValueError on anything else, or past `limit` names."""
    names: list[str] = []
    for item in _SPLIT.findall(text or ""):
        m = _ITEM.fullmatch(item.strip())
        if m is None:
            raise ValueError(f"hostlist {text!r}: cannot parse {item!r}")
        prefix, ranges, suffix = m.groups()
        if ranges is None:
            if prefix + suffix:
                names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"hostlist {text!r}: bad range {part!r}")
            width = len(lo)
            if int(hi or lo) - int(lo) + len(names) >= limit:
                raise ValueError(f"hostlist {text!r}: more than {limit} names")
            names.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi or lo) + 1))
    return names


def first_node(nodes: str) -> str:
    """First host of a Slurm hostlist ("h100-[1-2]" -> "h100-1"); "" for an empty or unreadable list."""
    try:
        names = expand_hostlist(nodes, limit=MAX_NAMES)
    except ValueError:
        return ""
    return names[0] if names else ""


__all__ = ["MAX_NAMES", "expand_hostlist", "first_node"]
