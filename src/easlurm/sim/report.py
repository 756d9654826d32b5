"""A campaign report: summary tables, significance tests, plots and the reference comparison, as Markdown+HTML."""

from __future__ import annotations

import csv
import html
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from easlurm import plots
from easlurm.files import atomic_writer, write_text_atomic
from easlurm.sim import site_baselines
from easlurm.sim.campaign import load_plan
from easlurm.sim.campaign_run import TIMING_METRICS, load_records, metric_columns, row_of
from easlurm.sim.differences import sentence as differences_sentence
from easlurm.sim.identical import merge
from easlurm.stats import (
    GROUP_KEYS,
    MetricSummary,
    PairTest,
    group_rows,
    mean_of,
    pairwise_mann_whitney,
    summarize,
)
from easlurm.units import format_energy, format_number

log = logging.getLogger(__name__)

#: (metric, column header, scale) of the main table; a metric absent from every run is left out. Energies
#: (keys ending in `_j`) are shown in J with an SI prefix, as every command shows them.
MAIN_COLUMNS = (
    ("throughput_jobs_per_h", "Throughput (jobs/h)", 1.0),
    ("energy_j", "Energy", 1.0),
    ("busy_energy_j", "Busy energy", 1.0),
    ("idle_energy_j", "Idle energy", 1.0),
    ("off_energy_j", "Off energy", 1.0),
    ("cycle_energy_j", "Cycle energy", 1.0),
    ("power_cycles", "Power cycles", 1.0),
    ("energy_per_job_j", "Energy/job", 1.0),
    ("mean_jct_s", "Mean JCT (s)", 1.0),
    ("p95_jct_s", "p95 JCT (s)", 1.0),
    ("deadline_miss_rate", "Deadline miss (%)", 100.0),
    ("jain_index", "Jain JCT", 1.0),
    ("mean_power_w", "Mean power (W)", 1.0),
    ("max_power_w", "Max power (W)", 1.0),
    ("time_over_budget_s", "Over budget (s)", 1.0),
    ("preemptions", "Preemptions", 1.0),
    ("preempted_energy_j", "Preempted energy", 1.0),
    ("colocated_jobs", "Jobs shared", 1.0),
    ("shared_job_h", "Shared (job-h)", 1.0),
)
#: Prefix of the per-GPU-type utilisation metrics (busy GPU-seconds / GPU-seconds, `util_h100_sxm`):
#: one column per type after MAIN_COLUMNS, so an idle node type shows in every report.
UTIL_PREFIX = "util_"
#: Columns shown only where some run has a non-zero value (co-location: where a GPU was shared, which
#: is where its gains and losses come from; power saving: where a node was powered down).
SHOWN_WHEN_NONZERO = frozenset(
    {"colocated_jobs", "shared_job_h", "off_energy_j", "cycle_energy_j", "power_cycles"}
)
#: Metrics tested pairwise in the report (all metrics are tested in tests.csv).
TESTED = (
    "throughput_jobs_per_h",
    "energy_j",
    "energy_per_job_j",
    "mean_jct_s",
    "deadline_miss_rate",
    "jain_index",
)
PLOT_KINDS = ("pareto", "tradeoff", "power", "deadline", "fairness", "load")


@dataclass
class ReportFiles:
    """Where the report went; `plots` are relative to the report's directory."""

    markdown: Path
    html: Path | None
    plots: list[str] = field(default_factory=list)
    summary_csv: Path | None = None
    tests_csv: Path | None = None


@dataclass
class _Doc:
    """Report blocks rendered twice (Markdown and HTML) so both say the same thing."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", (level, text)))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> None:
        """A table, or the sentence `empty` where it would have no row (never a bare header)."""
        if rows:
            self.blocks.append(("table", (list(header), [list(r) for r in rows])))
        else:
            self.p(empty)

    def img(self, rel: str, alt: str) -> None:
        self.blocks.append(("img", (rel, alt)))

    def markdown(self) -> str:
        out = []
        for kind, data in self.blocks:
            if kind == "h":
                out.append("#" * data[0] + " " + data[1])
            elif kind == "p":
                out.append(data)
            elif kind == "table":
                header, rows = data
                cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
                out.append("| " + " | ".join(cell(h) for h in header) + " |")
                out.append("|" + "---|" * len(header))
                out.extend("| " + " | ".join(cell(c) for c in r) + " |" for r in rows)
            elif kind == "img":
                out.append(f"![{data[1]}]({data[0]})")
            out.append("")
        return "\n".join(out)

    def html(self, title: str) -> str:
        e = html.escape
        out = [
            "<!doctype html>",
            f"<html><head><meta charset='utf-8'><title>{e(title)}</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
            "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
            "img{max-width:100%}</style></head><body>",
        ]
        for kind, data in self.blocks:
            if kind == "h":
                out.append(f"<h{data[0]}>{e(data[1])}</h{data[0]}>")
            elif kind == "p":
                out.append(f"<p>{e(data)}</p>")
            elif kind == "table":
                header, rows = data
                out.append("<table><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in header) + "</tr>")
                out.extend("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows)
                out.append("</table>")
            elif kind == "img":
                out.append(f"<p><a href='{e(data[0])}'><img src='{e(data[0])}' alt='{e(data[1])}'></a></p>")
        out.append("</body></html>")
        return "\n".join(out)


def fmt(value: float | None, scale: float = 1.0, metric: str = "") -> str:
    """Three significant digits, no exponent (2,200 not 2.2e+03); an energy (`metric` ending in `_j`) in J
    with an SI prefix; missing stays blank."""
    if value is None or not np.isfinite(value):
        return ""
    if metric.endswith("_j"):
        return format_energy(float(value) * scale)
    return format_number(float(value) * scale)


def fmt_ci(s: MetricSummary | None, scale: float = 1.0) -> str:
    if s is None or s.mean is None:
        return ""
    m = s.metric
    if s.ci_low is None or s.ci_high is None:
        return fmt(s.mean, scale, m)
    return f"{fmt(s.mean, scale, m)} [{fmt(s.ci_low, scale, m)}, {fmt(s.ci_high, scale, m)}]"


def build_report(
    results_dir: str | Path,
    *,
    title: str | None = None,
    report_cfg: Mapping[str, Any] | None = None,
    html_too: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
) -> ReportFiles:
    """Report on every run record under `results_dir`; the plan's `report` section is read from plan.yaml."""
    out = Path(results_dir)
    records = load_records(out)
    if report_cfg is None:
        report_cfg = _plan_report_section(out)
    return write_report(
        records,
        out,
        title=title or str(report_cfg.get("title") or f"Campaign report: {out.name}"),
        report_cfg=report_cfg,
        html_too=html_too,
        n_boot=n_boot,
        seed=seed,
    )


def _plan_report_section(out: Path) -> Mapping[str, Any]:
    plan_file = out / "plan.yaml"
    if not plan_file.is_file():
        return {}
    plan = load_plan(plan_file)
    cfg = dict(plan.report)
    cfg.setdefault("experiments", {e.name: e.description for e in plan.experiments if e.description})
    return cfg


def write_report(
    records: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    *,
    title: str,
    report_cfg: Mapping[str, Any] | None = None,
    html_too: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
) -> ReportFiles:
    """Write report.md (+ report.html), plots/*.png, summary.csv and tests.csv from run records.

    A record is what the campaign saves per run (index, run_id, experiment, label, spec, result); the
    trace replay builds the same shape, so both share this report. With `merge_identical` in
    `report_cfg`, policies whose runs are identical are one row (easlurm.sim.identical).
    """
    cfg = report_cfg or {}
    out = Path(out_dir)
    merged: list[str] = []
    if cfg.get("merge_identical"):
        records, merged = merge(records, frozenset(cfg.get("baseline_labels") or ()))
    rows = [row_of(r) for r in records]
    metrics = metric_columns(rows)
    summaries = summarize(rows, metrics, n_boot=n_boot, seed=seed)
    tests = pairwise_mann_whitney(rows, [m for m in metrics if m not in TIMING_METRICS])
    files = ReportFiles(markdown=out / "report.md", html=None)
    files.summary_csv = _write_csv(out / "summary.csv", [s.as_dict() for s in summaries])
    files.tests_csv = _write_csv(out / "tests.csv", [t.as_dict() for t in tests])
    doc = _Doc()
    doc.h(1, title)
    if cfg.get("description"):
        doc.p(str(cfg["description"]).strip())
    n_seeds = {len(v) for v in group_rows(rows).values()}
    doc.p(
        f"{len(rows)} runs, {len(group_rows(rows))} cells, seeds per cell: "
        f"{', '.join(map(str, sorted(n_seeds))) or '0'}. Cells show the mean over seeds and the seeded "
        f"bootstrap 95% CI of the mean ({n_boot} resamples). Data: results.csv (one row per run), "
        "summary.csv (every metric), tests.csv (Mann-Whitney U between every pair of policies)."
    )
    for sentence in merged:
        doc.p(sentence)
    reference = cfg.get("reference") or []
    if reference:
        _reference_section(doc, reference, summaries)
    plot_cfg = cfg.get("plots") or {}
    can_plot = plots.available()
    if not can_plot:  # the work is done: write the report without plots rather than fail
        log.warning("%s", plots.PLOTS_MISSING)
        doc.p(plots.PLOTS_MISSING)
    descriptions = cfg.get("experiments") or {}
    for experiment, exp_rows in group_rows(rows, ("experiment",)).items():
        kinds = plot_cfg.get(experiment[0], PLOT_KINDS) if can_plot else ()
        doc.h(2, f"Experiment {experiment[0]}")
        if descriptions.get(experiment[0]):
            doc.p(str(descriptions[experiment[0]]))
        _experiment_section(
            doc,
            out,
            str(experiment[0]),
            exp_rows,
            records,
            summaries,
            tests,
            kinds,
            files.plots,
            frozenset(cfg.get("baseline_labels") or ()),
        )
    write_text_atomic(files.markdown, doc.markdown())
    if html_too:
        files.html = out / "report.html"
        write_text_atomic(files.html, doc.html(title))
    log.info("report: %s (%d plots)", files.markdown, len(files.plots))
    return files


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with atomic_writer(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for r in rows:
            writer.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    return path


def _reference_value(ref: Mapping[str, Any], summaries: Sequence[MetricSummary]) -> tuple[float | None, str]:
    """Ours for one reference row: a mean (with CI) or, with `relative_to`, a ratio of means."""
    where = {k: ref[k] for k in ("experiment", "scenario", "load_jobs_per_h") if k in ref}
    metric = str(ref["metric"])
    s = mean_of(summaries, metric, label=ref["label"], **where)
    if s is None or s.mean is None:
        return None, ""
    if "relative_to" not in ref:
        return s.mean, fmt_ci(s)
    base = mean_of(summaries, metric, label=ref["relative_to"], **where)
    if base is None or not base.mean:
        return None, ""
    ratio = s.mean / base.mean
    return ratio, f"{ratio:.3g} ({fmt(s.mean, metric=metric)} / {fmt(base.mean, metric=metric)})"


def _thesis_text(ref: Mapping[str, Any], thesis: Any) -> str:
    """The reference figure as written, an absolute energy (J in the plan) with its SI prefix."""
    if thesis is None:
        return ""
    if (
        isinstance(thesis, int | float)
        and "relative_to" not in ref
        and str(ref.get("metric", "")).endswith("_j")
    ):
        return format_energy(float(thesis))
    return str(thesis)


def _reference_section(
    doc: _Doc, reference: Sequence[Mapping[str, Any]], summaries: Sequence[MetricSummary]
) -> None:
    doc.h(2, "Reference figures side by side")
    doc.p(
        "Each row states a reference figure (a value, or a ratio to another policy under the same "
        "conditions), ours from this campaign, the relative difference, and why they differ."
    )
    table = []
    for ref in reference:
        ours, text = _reference_value(ref, summaries) if "metric" in ref and "label" in ref else (None, "")
        thesis = ref.get("thesis")
        delta = ""
        if ours is not None and isinstance(thesis, int | float) and thesis:
            pct = round(100.0 * (ours / thesis - 1.0))
            delta = f"{pct:+d}%" if pct else "0%"
        table.append(
            [
                str(ref.get("claim", "")),
                _thesis_text(ref, thesis),
                text or "(not run)",
                delta,
                str(ref.get("why", "")).strip(),
            ]
        )
    doc.table(
        ["Figure", "Thesis", "Ours (mean [95% CI])", "Δ", "Why they differ"],
        table,
        "The plan names no reference figure.",
    )


def _experiment_section(
    doc: _Doc,
    out: Path,
    experiment: str,
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    summaries: Sequence[MetricSummary],
    tests: Sequence[PairTest],
    kinds: Sequence[str],
    plot_list: list[str],
    baselines: frozenset[str] = frozenset(),
) -> None:
    """The experiment's table, its plots, and per cell a sentence on where the policies differ (the
    `baselines` labels, such as a replay's recorded schedule, are not policies) and its tests."""
    mine = [s for s in summaries if s.group[0] == experiment]
    present = _experiment_table(doc, experiment, mine, baselines)
    cells = group_rows(rows, ("scenario", "load_jobs_per_h"))
    multi_load = len({c[1] for c in cells}) > 1
    figures = _Figures(doc, out, plot_list)
    slug = _slug(experiment)
    if multi_load and "load" in kinds:
        _load_plots(figures, experiment, mine, cells)
    for scenario, load in cells:
        cell_name = f"{_slug(scenario)}" + ("" if load is None else f"_load{load:g}")
        title = f"{experiment} / {scenario}" + ("" if load is None else f" @ {load:g} jobs/h")
        cell = [s for s in mine if s.group[1] == scenario and s.group[2] == load]
        if not multi_load:
            pick = {m: [s for s in cell if s.metric == m] for m in present}
            _cell_plots(
                figures, kinds, f"{slug}_{cell_name}", title, pick, (records, experiment, scenario, load)
            )
        why = differences_sentence(title, [s for s in cell if s.group[3] not in baselines])
        if why:
            doc.p(why)
        _, tradeoff = site_baselines.section(
            doc,
            title,
            [r for r in rows if r.get("scenario") == scenario and r.get("load_jobs_per_h") == load],
            baselines,
            plot_path=(
                figures.dir / f"{slug}_{cell_name}_tradeoff.png"
                if "tradeoff" in kinds and not multi_load
                else None
            ),
        )
        figures.add(tradeoff, "energy per job against mean JCT")
        _tests_table(doc, [t for t in tests if t.cell == (experiment, scenario, load)], title)


@dataclass
class _Figures:
    """Where an experiment's plots go, and how each one drawn is listed and shown in the document."""

    doc: _Doc
    out: Path
    plot_list: list[str]

    @property
    def dir(self) -> Path:
        return self.out / "plots"

    def add(self, path: Path | None, alt: str) -> None:
        """List and show a plot; None (nothing to draw, or plotting unavailable) adds nothing."""
        if path is not None:
            rel = str(path.relative_to(self.out))
            self.plot_list.append(rel)
            self.doc.img(rel, alt)


def _experiment_table(
    doc: _Doc, experiment: str, mine: Sequence[MetricSummary], baselines: frozenset[str]
) -> set[str]:
    """The experiment's table of means and intervals; returns the metrics it has a value for."""
    present = {
        s.metric for s in mine if s.mean is not None and (s.metric not in SHOWN_WHEN_NONZERO or s.mean > 0)
    }
    cols = [c for c in MAIN_COLUMNS if c[0] in present] + util_columns(present)
    # a load column only where the plan set a load (a blank or "default" column says nothing)
    has_load = any(s.group[2] is not None for s in mine)
    table = []
    for group in dict.fromkeys(s.group for s in mine):
        by_metric = {s.metric: s for s in mine if s.group == group}
        load = [fmt(group[2]) if group[2] is not None else "scenario's own"] if has_load else []
        table.append([group[1], *load, group[3], *(fmt_ci(by_metric.get(m), sc) for m, _, sc in cols)])
    header = ["Scenario", *(["Load (jobs/h)"] if has_load else []), "Policy", *(h for _, h, _ in cols)]
    doc.table(header, table, f"No run of experiment {experiment} has a result.")
    if any(s.metric == "jain_index" and s.mean is None and s.group[3] not in baselines for s in mine):
        doc.p(
            "Jain JCT is unknown (blank, or no column) where the runs have fewer than two users or the trace "
            "no user column: fairness between users is unknown there, not perfect."
        )
    return present


def _load_plots(
    figures: _Figures, experiment: str, mine: Sequence[MetricSummary], cells: Iterable[tuple[Any, ...]]
) -> None:
    """With several loads: JCT, throughput and energy against the load, per scenario."""
    slug = _slug(experiment)
    for scenario in dict.fromkeys(c[0] for c in cells):
        for metric, ylabel, scale in (
            ("mean_jct_s", "mean JCT (s)", 1.0),
            ("throughput_jobs_per_h", "throughput (jobs/h)", 1.0),
            ("energy_j", "energy (MJ)", 1e-6),
        ):
            series: dict[str, list[MetricSummary]] = {}
            for s in mine:
                if s.metric == metric and s.group[1] == scenario:
                    series.setdefault(str(s.group[3]), []).append(s)
            figures.add(
                plots.plot_vs_load(
                    series,
                    figures.dir / f"{slug}_{_slug(scenario)}_{metric}_vs_load.png",
                    f"{experiment} / {scenario}: {ylabel} vs load",
                    ylabel,
                    scale,
                ),
                f"{metric} vs load",
            )


def _cell_plots(
    figures: _Figures,
    kinds: Sequence[str],
    stem: str,
    title: str,
    pick: Mapping[str, list[MetricSummary]],
    where: tuple[Sequence[Mapping[str, Any]], str, Any, Any],
) -> None:
    """One cell's plots (one load): the kinds the report asks for, each where its data is; `where` is
    (records, experiment, scenario, load) for the plots drawn from the runs themselves."""
    records, experiment, scenario, load = where
    if "pareto" in kinds:
        figures.add(
            plots.plot_pareto(
                pick.get("throughput_jobs_per_h", []),
                pick.get("energy_j", []),
                figures.dir / f"{stem}_pareto.png",
                f"{title}: throughput vs energy",
            ),
            "throughput vs energy",
        )
    if "deadline" in kinds and any(s.mean for s in pick.get("deadline_miss_rate", [])):
        figures.add(
            plots.plot_bars(
                pick["deadline_miss_rate"],
                figures.dir / f"{stem}_deadline_miss.png",
                f"{title}: deadline miss rate",
                "deadline miss rate (%)",
                100.0,
            ),
            "deadline miss rate",
        )
    if "fairness" in kinds and pick.get("jain_index"):
        figures.add(
            plots.plot_bars(
                pick["jain_index"],
                figures.dir / f"{stem}_jain.png",
                f"{title}: Jain's index of per-user mean JCT",
                "Jain's index",
            ),
            "Jain's index",
        )
        shares = _user_shares(records, experiment, scenario, load)
        figures.add(
            plots.plot_user_shares(
                shares, figures.dir / f"{stem}_user_share.png", f"{title}: GPU-second shares"
            ),
            "per-user GPU-second shares",
        )
    if "power" in kinds:
        series_p, budget = _power_series(records, experiment, scenario, load)
        figures.add(
            plots.plot_power(
                series_p, figures.dir / f"{stem}_power.png", f"{title}: cluster power (first seed)", budget
            ),
            "cluster power over time",
        )


def util_columns(metrics: Any) -> list[tuple[str, str, float]]:
    """(metric, header, scale) of each GPU type's utilisation among `metrics`, in percent."""
    names = sorted(m for m in metrics if m.startswith(UTIL_PREFIX))
    return [(m, f"{m.removeprefix(UTIL_PREFIX)} util (%)", 100.0) for m in names]


def _tests_table(doc: _Doc, tests: Sequence[PairTest], title: str) -> None:
    """p-values of the pairs where both sides have several runs: one value against others is no test."""
    single = sorted({t.label_a for t in tests if t.n_a < 2} | {t.label_b for t in tests if t.n_b < 2})
    tests = [t for t in tests if t.n_a >= 2 and t.n_b >= 2]
    if single and not tests:
        doc.p(f"{title}: one seed: no test (a p-value needs several seeds per policy).")
        return
    by_pair: dict[tuple[str, str], dict[str, PairTest]] = {}
    for t in tests:
        if t.metric in TESTED:
            by_pair.setdefault((t.label_a, t.label_b), {})[t.metric] = t
    metrics = [m for m in TESTED if any(m in d for d in by_pair.values())]
    if not by_pair or not metrics:
        return
    doc.p(
        f"{title}: two-sided p-values, Mann-Whitney U / seed-paired Wilcoxon (the same seed gives every "
        "policy the same job stream, so the paired test sees smaller differences); p < 0.05 marked *."
        + (f" Not tested, one run only: {', '.join(single)}." if single else "")
    )
    rows = []
    for (a, b), d in by_pair.items():
        cells = []
        for m in metrics:
            cells.append(_p_cell(d.get(m)))
        rows.append([a, b, *cells])
    doc.table(["Policy A", "Policy B", *metrics], rows, f"{title}: no pair of policies to test.")


def _p_cell(test: PairTest | None) -> str:
    if test is None:
        return ""

    def one(p: float | None) -> str:
        return "-" if p is None else f"{p:.2g}" + ("*" if p < 0.05 else "")

    return f"{one(test.p_value)} / {one(test.p_paired)}"


def _matching(
    records: Sequence[Mapping[str, Any]], experiment: str, scenario: Any, load: Any
) -> list[Mapping[str, Any]]:
    return [
        r
        for r in records
        if r["experiment"] == experiment
        and r["spec"]["scenario"] == scenario
        and r["spec"]["load_jobs_per_h"] == load
    ]


def _power_series(
    records: Sequence[Mapping[str, Any]], experiment: str, scenario: Any, load: Any
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], float | None]:
    """Per label, the power curve of its lowest seed; the budget if the cell has one."""
    first: dict[str, Mapping[str, Any]] = {}
    for r in sorted(_matching(records, experiment, scenario, load), key=lambda r: r["spec"]["seed"]):
        first.setdefault(str(r["label"]), r)
    series = {}
    budgets = set()
    for label, r in first.items():
        res = r["result"]
        t, p = res.get("power_times_s"), res.get("power_w")
        if t and p and len(t) == len(p):
            series[label] = (np.asarray(t, float), np.asarray(p, float))
        if r["spec"].get("power_budget_w") is not None:
            budgets.add(float(r["spec"]["power_budget_w"]))
    return series, (min(budgets) if budgets else None)


def _user_shares(
    records: Sequence[Mapping[str, Any]], experiment: str, scenario: Any, load: Any
) -> dict[str, dict[str, float]]:
    """Per label, each user's GPU-second share averaged over seeds."""
    acc: dict[str, dict[str, list[float]]] = {}
    for r in _matching(records, experiment, scenario, load):
        shares = r["result"].get("user_gpu_share") or {}
        for user, share in shares.items():
            if share is not None:
                acc.setdefault(str(r["label"]), {}).setdefault(str(user), []).append(float(share))
    return {lab: {u: float(np.mean(v)) for u, v in d.items()} for lab, d in acc.items()}


def _slug(text: Any) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


def stats_document(rows: Sequence[Mapping[str, Any]], n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Summaries and tests as one JSON-safe document (for `easlurm sim report --json`)."""
    metrics = metric_columns(rows)
    return {
        "schema_version": 1,
        "group_keys": list(GROUP_KEYS),
        "summaries": [s.as_dict() for s in summarize(rows, metrics, n_boot=n_boot, seed=seed)],
        "tests": [
            t.as_dict() for t in pairwise_mann_whitney(rows, [m for m in metrics if m not in TIMING_METRICS])
        ],
    }


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=1, allow_nan=False)
