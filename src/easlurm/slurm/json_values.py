"""Values of Slurm's JSON output (`squeue/sinfo/sacct/scontrol --json`) across data_parser versions.

22.05 (v0.0.38) prints plain numbers, strings and sentinels; 24.11 (v0.0.42) and 26.05 (v0.0.45) wrap
numbers as `{"set": bool, "infinite": bool, "number": N}` and print states as lists of flags
(`job_state: ["RUNNING"]`, node `state: ["MIXED", "DRAIN"]`). Every reader of Slurm JSON goes through
these helpers, so a schema change is handled once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.states import FINAL_JOB_STATES

#: Slurm's NO_VAL / INFINITE sentinels (32-bit, and as minutes x 60), printed where later schemas say
#: set/infinite; a never-started job's start time is NO_VAL.
SENTINELS = frozenset({4294967294, 4294967295, 4294967294 * 60, 4294967295 * 60})
#: A key that is absent (distinct from a JSON null).
MISSING: Any = object()

#: A job's base states (one per job): the final ones and those before; every other word in a state list
#: is a flag (REQUEUED, COMPLETING, ...).
JOB_BASE_STATES = FINAL_JOB_STATES | {"PENDING", "RUNNING", "SUSPENDED"}
#: A node's base states; flags (DRAIN, COMPLETING, NOT_RESPONDING, ...) come beside them.
NODE_BASE_STATES = frozenset({"IDLE", "DOWN", "ALLOCATED", "MIXED", "ERROR", "FUTURE", "UNKNOWN"})


def dig(obj: Any, dotted: str) -> Any:
    """obj["a"]["b"] for "a.b"; MISSING where a key is absent or a level is not an object."""
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return MISSING
        obj = obj[part]
    return obj


def num(value: Any) -> float | None:
    """A plain number, a digit string or `{set, infinite, number}` -> float; unset, infinite, a sentinel,
    a boolean or anything else -> None."""
    if value is MISSING or value is None or isinstance(value, bool):
        return None
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
        if isinstance(value, bool):
            return None
    if isinstance(value, int | float):
        return None if value in SENTINELS else float(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return float(value)
    return None


def integer(value: Any, default: int = 0) -> int:
    """`num` as an int, `default` where there is no number."""
    n = num(value)
    return default if n is None else int(n)


def epoch(value: Any) -> float | None:
    """A Slurm time (epoch seconds): 0, unset or a sentinel -> None."""
    n = num(value)
    return n if n is not None and n > 0 else None


def text(value: Any) -> str | None:
    """A string field; a list (later schemas) gives its first item; absent or null -> None."""
    if value is MISSING or value is None:
        return None
    if isinstance(value, list):
        return None if not value or value[0] is None else str(value[0])
    return str(value)


def words(value: Any) -> tuple[str, ...]:
    """A state or flag field as upper-case words: "RUNNING", ["MIXED", "DRAIN"] or "idle+drain"."""
    if value is MISSING or value is None:
        return ()
    items: Iterable[Any] = value if isinstance(value, list) else str(value).replace("+", " ").split()
    return tuple(str(w).strip().upper() for w in items if str(w).strip())


def split_state(
    value: Any, base_states: frozenset[str], extra_flags: Any = None
) -> tuple[str, tuple[str, ...]]:
    """(base state, flags) of a job or node state in any schema. 22.05 prints a node as
    `state: "idle", state_flags: ["DRAIN"]`; later versions `state: ["IDLE", "DRAIN"]`. The base is the first
    word that is a base state (else the first word); every other word is a flag."""
    all_words = words(value) + words(extra_flags)
    base = next((w for w in all_words if w in base_states), all_words[0] if all_words else "")
    return base, tuple(w for w in all_words if w != base)


def job_state(value: Any) -> tuple[str, tuple[str, ...]]:
    """(base state, flags) of a job: "RUNNING" or ["PENDING", "REQUEUED"]."""
    return split_state(value, JOB_BASE_STATES)


def load_document(raw: str, what: str) -> dict[str, Any]:
    """A Slurm JSON document; SlurmError naming the command if it is not one or reports errors."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"{what}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SlurmError(f"{what}: unexpected document")
    errors = [e for e in doc.get("errors") or () if e]
    if errors:
        first = errors[0]
        if isinstance(first, dict):
            first = first.get("description") or first.get("error") or first
        raise SlurmError(f"{what}: {first}")
    return doc


__all__ = [
    "JOB_BASE_STATES",
    "MISSING",
    "NODE_BASE_STATES",
    "SENTINELS",
    "dig",
    "epoch",
    "integer",
    "job_state",
    "load_document",
    "num",
    "split_state",
    "text",
    "words",
]
