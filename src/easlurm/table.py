"""sacct-style tables: CamelCase headers, aligned columns, or `-P` pipe-delimited without padding."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from easlurm.errors import ConfigError


def select_columns(requested: str | None, available: Sequence[str], default: Sequence[str]) -> list[str]:
    """Match a `--format a,b,c` list case-insensitively against known columns; unknown names are an error."""
    if not requested:
        return list(default)
    by_lower = {name.lower(): name for name in available}
    chosen = []
    for raw in requested.split(","):
        name = raw.strip().split("%")[0]
        if not name:
            continue
        if name.lower() not in by_lower:
            raise ConfigError(f"--format: unknown column {name!r} (known: {', '.join(available)})")
        chosen.append(by_lower[name.lower()])
    if not chosen:
        raise ConfigError("--format: no columns given")
    return chosen


def render_table(
    columns: Sequence[str],
    rows: Iterable[Mapping[str, Any]],
    parsable: bool = False,
    header: bool = True,
    marks: Sequence[str] | None = None,
) -> str:
    """Render rows (mappings keyed by column name; missing -> blank). `marks` adds a trailing flag column."""
    cells = [["" if row.get(c) is None else str(row.get(c)) for c in columns] for row in rows]
    if marks is not None:
        cells = [line + ([marks[i]] if i < len(marks) else [""]) for i, line in enumerate(cells)]
        columns = [*columns, ""]
    if parsable:
        lines = (["|".join(columns)] if header else []) + [
            "|".join(c.replace("|", "/") for c in line) for line in cells
        ]
        return "\n".join(lines)
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    out = []
    if header:
        out.append(" ".join(c.rjust(w) for c, w in zip(columns, widths)).rstrip())
        out.append(" ".join("-" * w for w in widths).rstrip())
    out.extend(" ".join(v.rjust(w) for v, w in zip(line, widths)).rstrip() for line in cells)
    return "\n".join(out)
