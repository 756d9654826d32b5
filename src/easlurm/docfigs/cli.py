"""`easlurm sim doc-figures`: rerun the campaigns behind docs/ and rewrite (or check) their figures."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from easlurm.docfigs.figures import regenerate
from easlurm.docfigs.renderers import DOCS
from easlurm.errors import EaslurmError


@click.command("doc-figures")
@click.argument("names", nargs=-1)
@click.option("--check", is_flag=True, help="Exit 1 when a doc differs from its regenerated figures.")
@click.option(
    "--root",
    type=click.Path(file_okay=False, exists=True),
    default=".",
    show_default=True,
    help="Repository root (docs/ and campaigns/ are read from there).",
)
@click.option(
    "-O",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep the campaigns' runs here (one folder per doc; finished runs are reused).",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True)
def doc_figures_cmd(names: tuple[str, ...], check: bool, root: str, out_dir: str | None, jobs: int) -> None:
    """Regenerate the figures of NAMES (default: all) between their doc's markers."""
    unknown = [n for n in names if n not in DOCS]
    if unknown:
        raise click.UsageError(f"unknown doc {', '.join(unknown)} (known: {', '.join(DOCS)})")
    stale = []
    with tempfile.TemporaryDirectory(prefix="easlurm-doc-figures-") as tmp:
        base = Path(out_dir) if out_dir else Path(tmp)
        for name in names or tuple(DOCS):
            figures = DOCS[name]
            doc = Path(root) / figures.doc
            try:
                text = regenerate(figures, Path(root), base / name, jobs=jobs)
            except EaslurmError as exc:
                raise click.ClickException(str(exc)) from exc
            if text == doc.read_text():
                click.echo(f"{figures.doc}: up to date")
            elif check:
                stale.append(figures.doc)
                click.echo(f"{figures.doc}: differs from its regenerated figures", err=True)
            else:
                doc.write_text(text)
                click.echo(f"{figures.doc}: rewritten")
    if stale:
        raise SystemExit(1)
