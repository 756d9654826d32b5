"""Figures quoted in docs/: each doc's campaign is rerun and its figures rewritten between markers."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.sim.campaign import load_plan
from easlurm.sim.campaign_run import load_records, row_of, run_campaign
from easlurm.stats import MetricSummary, pairwise_mann_whitney, summarize

log = logging.getLogger(__name__)

#: Bootstrap resamples and seed of every CI quoted in a doc (as `easlurm sim report` uses by default).
N_BOOT, BOOT_SEED = 2000, 0
BEGIN = "<!-- BEGIN doc-figures {name} -->"
END = "<!-- END doc-figures {name} -->"

#: (repository root, work folder, processes) -> what the doc's renderer reads
Source = Callable[[Path, Path, int], Any]


@dataclass(frozen=True)
class DocFigures:
    """One doc (path from the repository root) whose marked blocks `render` writes from what `source`
    computes (a campaign's runs, an evaluation); `inputs` names what the source reads, for messages."""

    doc: str
    inputs: str
    source: Source
    render: Callable[[Any], dict[str, str]]


class Runs:
    """A campaign's run records with the per-label helpers that renderers quote from."""

    def __init__(self, records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> None:
        self.records = list(records)
        self.rows = list(rows)
        metrics = sorted({k for r in self.rows for k, v in r.items() if isinstance(v, float)})
        self.summaries = summarize(self.rows, metrics, n_boot=N_BOOT, seed=BOOT_SEED)
        self._tests: dict[tuple[str, str, str, str], float | None] = {}

    def summary(self, experiment: str, label: str, metric: str) -> MetricSummary:
        for s in self.summaries:
            if s.group[0] == experiment and s.group[3] == label and s.metric == metric:
                return s
        raise ConfigError(f"doc figures: no {metric} for {label} in experiment {experiment}")

    def mean(self, experiment: str, label: str, metric: str) -> float:
        value = self.summary(experiment, label, metric).mean
        if value is None:
            raise ConfigError(f"doc figures: {metric} of {label} in {experiment} has no value")
        return value

    def per_seed(self, experiment: str, label: str, metric: str) -> dict[int, float]:
        return {
            int(r["seed"]): float(r[metric])
            for r in self.rows
            if r["experiment"] == experiment and r["label"] == label and r.get(metric) is not None
        }

    def total(self, experiment: str, label: str, metric: str) -> float:
        return float(sum(self.per_seed(experiment, label, metric).values()))

    def jobs(self, experiment: str, label: str) -> list[Mapping[str, Any]]:
        """Per-job rows of every seed of one cell."""
        return [
            job
            for rec in self.records
            if rec["experiment"] == experiment and rec["label"] == label
            for job in rec["result"].get("jobs") or []
        ]

    def identical(self, experiment: str, a: str, b: str) -> bool:
        """Every metric (timings aside) equal in every seed: the two labels made the same decisions."""
        skip = {"wall_s", "events_per_s", "replay_wall_s", "jobs_per_s"}
        ra = {int(r["seed"]): r for r in self.rows if r["experiment"] == experiment and r["label"] == a}
        rb = {int(r["seed"]): r for r in self.rows if r["experiment"] == experiment and r["label"] == b}
        if not ra or ra.keys() != rb.keys():
            return False
        for seed, row in ra.items():
            for k, v in row.items():
                w = rb[seed].get(k)
                if (
                    isinstance(v, float)
                    and k not in skip
                    and not np.isclose(v, float(w or 0.0), equal_nan=True)
                ):
                    return False
        return True

    def p_paired(self, experiment: str, a: str, b: str, metric: str) -> float | None:
        """Seed-paired Wilcoxon p between two labels of one experiment."""
        key = (experiment, a, b, metric)
        if key not in self._tests:
            rows = [r for r in self.rows if r["experiment"] == experiment and r["label"] in (a, b)]
            tests = pairwise_mann_whitney(rows, [metric])
            self._tests[key] = next((t.p_paired for t in tests if {t.label_a, t.label_b} == {a, b}), None)
        return self._tests[key]


# -- formatting ----------------------------------------------------------------------------------


def num(value: float, scale: float = 1.0) -> str:
    """Three significant digits, whole numbers from 1000 (as the campaign report writes them)."""
    v = value * scale
    if v == 0:
        return "0"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def ci(s: MetricSummary, scale: float = 1.0) -> str:
    """mean [low, high]; a metric that is 0 in every seed is written 0."""
    if s.mean is None:
        return ""
    if s.ci_low is None or s.ci_high is None or (s.mean == 0 and s.ci_low == 0 and s.ci_high == 0):
        return num(s.mean, scale)
    return f"{num(s.mean, scale)} [{num(s.ci_low, scale)}, {num(s.ci_high, scale)}]"


def pct_change(new: float, old: float) -> float:
    return 100.0 * (new / old - 1.0) if old else float("nan")


def signed_pct(new: float, old: float, digits: int = 1) -> str:
    return f"{pct_change(new, old):+.{digits}f} %"


def p_text(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -- markers -------------------------------------------------------------------------------------


def blocks_in(text: str) -> list[str]:
    """Names of the marked blocks of a doc, in order."""
    return re.findall(r"<!-- BEGIN doc-figures (\S+) -->", text)


def replace_blocks(text: str, blocks: Mapping[str, str], source: str = "doc") -> str:
    """`text` with each marked block's body replaced; a block rendered but not marked (or marked but not
    rendered) is a ConfigError, so a doc and its renderer cannot drift apart silently."""
    marked = blocks_in(text)
    if sorted(marked) != sorted(blocks):
        raise ConfigError(
            f"{source}: marked blocks {sorted(marked)} differ from rendered blocks {sorted(blocks)}"
        )
    for name, body in blocks.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        start = text.index(begin) + len(begin)
        stop = text.find(end, start)
        if stop < 0:
            raise ConfigError(f"{source}: block {name} has no end marker")
        text = text[:start] + "\n" + body.strip("\n") + "\n" + text[stop:]
    return text


# -- running ------------------------------------------------------------------------------------


def campaign_source(plan_path: str) -> Source:
    """Run a campaign plan (finished runs in the work folder are reused) and hand over its runs."""

    def run(root: Path, work_dir: Path, jobs: int) -> Runs:
        outcome = run_campaign(load_plan(root / plan_path), work_dir, jobs=jobs, write_results=False)
        if outcome.failed:
            raise ConfigError(f"{plan_path}: {len(outcome.failed)} run(s) failed")
        records = load_records(work_dir)
        return Runs(records, [row_of(r) for r in records])

    return run


def regenerate(figures: DocFigures, root: Path, work_dir: Path, jobs: int = 1) -> str:
    """The doc's text with its marked blocks rendered from a fresh computation in `work_dir`."""
    data = figures.source(root, work_dir, jobs)
    return replace_blocks((root / figures.doc).read_text(), figures.render(data), figures.doc)
