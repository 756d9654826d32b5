"""sacct-style tables: CamelCase headers, aligned columns, or `-p`/`-P` delimited without padding."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from easlurm.errors import ConfigError


@dataclass(frozen=True)
class Column:
    """One `--format` entry. `width` is sacct's `%N` suffix: N > 0 right-aligns in N characters, N < 0
    left-aligns; a longer value is cut and ends with '+'. None: as wide as the widest value."""

    name: str
    width: int | None = None


#: the widest column a `--format NAME%N` may ask for
MAX_WIDTH = 1000


def parse_format(requested: str | None, available: Sequence[str], default: Sequence[str]) -> list[Column]:
    """Match a `--format a,b%20,c%-8` list case-insensitively against known columns; unknown names and
    widths that are not integers are errors."""
    if not requested:
        return [Column(name) for name in default]
    by_lower = {name.lower(): name for name in available}
    chosen = []
    for raw in requested.split(","):
        name, pct, size = raw.strip().partition("%")
        if not name:
            continue
        if name.lower() not in by_lower:
            raise ConfigError(f"--format: unknown column {name!r} (known: {', '.join(available)})")
        width = None
        if pct:
            try:
                width = int(size)
            except ValueError:
                raise ConfigError(
                    f"--format: {raw.strip()!r}: the width after % must be an integer"
                ) from None
            if abs(width) > MAX_WIDTH:  # `%999...` is an OverflowError in str.format, or a GB-wide line
                raise ConfigError(
                    f"--format: {raw.strip()!r}: the width after % must be between -{MAX_WIDTH} and {MAX_WIDTH}"
                )
            width = width or None
        chosen.append(Column(by_lower[name.lower()], width))
    if not chosen:
        raise ConfigError("--format: no columns given")
    return chosen


def select_columns(requested: str | None, available: Sequence[str], default: Sequence[str]) -> list[str]:
    """Column names of a `--format` list (widths are read and dropped)."""
    return [c.name for c in parse_format(requested, available, default)]


def _fit(text: str, width: int) -> str:
    """sacct's fixed-width cell: cut to |width| with a '+' as the last character, aligned by sign."""
    size = abs(width)
    if len(text) > size:
        text = text[: size - 1] + "+" if size > 1 else text[:size]
    return text.ljust(size) if width < 0 else text.rjust(size)


def render_table(
    columns: Sequence[str],
    rows: Iterable[Mapping[str, Any]],
    parsable: bool = False,
    header: bool = True,
    *,
    delimiter: str = "|",
    trailing: bool = False,
    widths: Sequence[int | None] | None = None,
) -> str:
    """Render rows (mappings keyed by column name; missing -> blank). Parsable: `delimiter` between cells
    (a cell's own delimiter characters become '/', or '|' when the delimiter is '/', so every line splits
    into as many cells as there are columns) and, with `trailing`, after the last one too (sacct -p).
    Aligned: `widths` as `Column.width`; others are as wide as their widest value and right-aligned."""
    cells = [["" if row.get(c) is None else str(row.get(c)) for c in columns] for row in rows]
    if parsable:
        stand_in = "|" if delimiter == "/" else "/"
        end = delimiter if trailing else ""
        lines = ([delimiter.join(columns) + end] if header else []) + [
            delimiter.join(c.replace(delimiter, stand_in) for c in line) + end for line in cells
        ]
        return "\n".join(lines)
    fixed = list(widths) if widths is not None else [None] * len(columns)
    sizes: list[int] = [
        fixed[i] or max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)
    ]
    out = []
    if header:
        out.append(" ".join(_fit(c[: abs(w)], w) for c, w in zip(columns, sizes)).rstrip())
        out.append(" ".join("-" * abs(w) for w in sizes).rstrip())
    out.extend(" ".join(_fit(v, w) for v, w in zip(line, sizes)).rstrip() for line in cells)
    return "\n".join(out)


def delimiter_clashes(columns: Sequence[str], rows: Iterable[Mapping[str, Any]], delimiter: str) -> list[str]:
    """Columns where some value holds the delimiter (`render_table` replaces it; the CLI says so)."""
    found = {c for row in rows for c in columns if delimiter in str(row.get(c) or "")}
    return [c for c in columns if c in found]
