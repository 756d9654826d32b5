"""`easlurm sim campaign PLAN` and `easlurm sim report DIR`: run a campaign (locally or as a Slurm array) and report."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import click

from easlurm.cli import int_range, load_ctx_config, output_options
from easlurm.errors import ConfigError, EaslurmError
from easlurm.files import check_writable
from easlurm.model.build import apply_oracle_config
from easlurm.model.cli import HARDWARE_OPTION
from easlurm.sim.campaign import Run, check_names, load_plan, parse_index_list
from easlurm.sim.campaign_run import load_rows, pending_runs, run_campaign, write_tables
from easlurm.sim.campaign_slurm import submit_array
from easlurm.sim.report import build_report, dumps, stats_document


class _Bar:
    """tqdm on stderr when installed, else a one-line counter; off when stderr is not a terminal."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self.total, self.done, self.desc = total, 0, desc
        self.enabled = enabled
        self._tqdm: Any = None
        if enabled:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, desc=desc, unit="run", file=sys.stderr)
            except ImportError:
                pass

    def update(self, n: int) -> None:
        self.done += n
        if self._tqdm is not None:
            self._tqdm.update(n)
        elif self.enabled:
            click.echo(f"\r{self.desc}: {self.done}/{self.total} runs", err=True, nl=False)

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
        elif self.enabled:
            click.echo("", err=True)


@click.command("campaign")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option(
    "-O", "--out", "out_dir", type=click.Path(file_okay=False), default="results", show_default=True
)
@click.option(
    "-j", "--jobs", type=int_range(1, 1024), default=1, show_default=True, help="Parallel processes."
)
@click.option("--slurm", is_flag=True, help="Submit the runs as a Slurm job array, wait, then aggregate.")
@click.option("--partition", default=None, help="Slurm partition of the array (with --slurm).")
@click.option(
    "--max-tasks", type=int_range(1, 1_000_000), default=64, show_default=True, help="Array size cap."
)
@click.option("--time", "time_limit", default=None, help="Slurm time limit per array task, e.g. 30:00.")
@click.option("--only-index", default=None, help="Run only these plan indices, e.g. 0,3,5-9.")
@click.option("--chunk", type=int_range(0), default=None, help="Run chunk I of --chunk-size runs.")
@click.option("--chunk-size", type=int_range(1), default=None)
@click.option("--dry-run", is_flag=True, help="List the expanded runs and exit.")
@click.option("--report/--no-report", default=True, show_default=True, help="Write the report at the end.")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: if a tty).")
@click.option(
    "--runner", "runner_ref", default=None, hidden=True, help="MODULE:FUNCTION replacing the simulator."
)
@HARDWARE_OPTION
@click.pass_context
def campaign_cmd(
    ctx: click.Context,
    hardware_path: str | None,
    plan_file: str,
    out_dir: str,
    jobs: int,
    slurm: bool,
    partition: str | None,
    max_tasks: int,
    time_limit: str | None,
    only_index: str | None,
    chunk: int | None,
    chunk_size: int | None,
    dry_run: bool,
    report: bool,
    progress: bool | None,
    runner_ref: str | None,
) -> None:
    """Expand PLAN_FILE (scenarios x policies x loads x seeds) and run it; finished runs are kept and skipped."""
    if not dry_run:
        check_writable(out_dir, "--out", directory=True)
    cfg = load_ctx_config(ctx)
    apply_oracle_config(cfg, hardware_path)
    plan = load_plan(plan_file, defaults=cfg.section("sim"))
    check_names(plan)
    runs = plan.runs()
    indices = _selected(only_index, chunk, chunk_size, len(runs))
    if dry_run:
        for run in runs if indices is None else [runs[i] for i in indices if 0 <= i < len(runs)]:
            click.echo(f"{run.index}\t{run.run_id}")
        return
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frozen = out / "plan.yaml"
    whole = chunk is None and only_index is None
    if whole and (not frozen.exists() or not frozen.samefile(plan_file)):
        shutil.copyfile(plan_file, frozen)
    if slurm:
        if pending_runs(runs, out):
            _run_on_slurm(ctx, Path(plan_file), out, len(runs), partition, max_tasks, time_limit, runner_ref)
        _gather_array(runs, out, report)
        return
    total = len(runs) if indices is None else len(indices)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _Bar(total, show, plan.name)
    try:
        outcome = run_campaign(
            plan, out, jobs=jobs, indices=indices, progress=bar.update, **_runner_kw(runner_ref)
        )
    finally:
        bar.close()
    click.echo(
        f"{plan.name}: {outcome.executed} run, {outcome.skipped} already done, "
        f"{len(outcome.failed)} failed in {outcome.wall_s:.1f} s -> {out}/results.csv",
        err=True,
    )
    if report and chunk is None and only_index is None:
        _report(out)
    if outcome.failed:
        first = next(iter(outcome.failed.items()))
        raise EaslurmError(f"{len(outcome.failed)} runs failed; first: {first[0]}: {first[1]}")


def _selected(
    only_index: str | None, chunk: int | None, chunk_size: int | None, n_runs: int
) -> list[int] | None:
    """The plan indices --only-index and --chunk select (None: all of them)."""
    indices: list[int] | None = None
    if only_index is not None:
        indices = parse_index_list(only_index)
    if chunk is not None:
        if chunk_size is None:
            raise ConfigError("--chunk needs --chunk-size")
        lo = chunk * chunk_size
        indices = [i for i in range(lo, min(lo + chunk_size, n_runs)) if indices is None or i in indices]
    return indices


def _gather_array(runs: list[Run], out: Path, report: bool) -> None:
    """After the job array: the tables (and report) of what it left; EaslurmError names the runs missing."""
    rows = load_rows(out)
    write_tables(out, rows)
    missing = len(pending_runs(runs, out))
    click.echo(f"slurm: {len(runs) - missing}/{len(runs)} runs present in {out}", err=True)
    if report:
        _report(out)
    if missing:
        raise EaslurmError(f"{missing} runs are missing after the job array; see {out}/slurm/*.out")


def _run_on_slurm(
    ctx: click.Context,
    plan_path: Path,
    out: Path,
    n_runs: int,
    partition: str | None,
    max_tasks: int,
    time_limit: str | None,
    runner_ref: str | None,
) -> None:
    config_path = (ctx.find_root().obj or {}).get("config_path")
    sub = submit_array(
        plan_path,
        out,
        n_runs,
        max_tasks=max_tasks,
        partition=partition,
        time_limit=time_limit,
        config_path=str(Path(config_path).resolve()) if config_path else None,
        runner_ref=runner_ref,
    )
    click.echo(f"slurm: job array {sub.job_id} ({sub.n_tasks} tasks) finished", err=True)


def _runner_kw(ref: str | None) -> dict[str, Any]:
    """`--runner module:function` (tests, other engines) as run_campaign's keyword; none = the simulator."""
    if ref is None:
        return {}
    import importlib

    module, _, attr = ref.partition(":")
    try:
        return {"runner": getattr(importlib.import_module(module), attr)}
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"--runner: cannot load {ref!r} ({exc})") from exc


def _report(out: Path) -> None:
    files = build_report(out)
    click.echo(f"report: {files.markdown}" + (f", {files.html}" if files.html else ""), err=True)


@click.command("report")
@click.argument("results_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--title", default=None, help="Report title (default: the plan's report.title).")
@click.option("--html/--no-html", "html_too", default=True, show_default=True)
@click.option("--bootstrap", "n_boot", type=int_range(100, 10_000_000), default=2000, show_default=True)
@click.option(
    "--seed", type=int_range(), default=0, show_default=True, help="Seed of the bootstrap resampling."
)
@output_options(table=False, json_help="Print the statistics as one JSON document too.")
def report_cmd(
    results_dir: str, title: str | None, html_too: bool, n_boot: int, seed: int, as_json: bool
) -> None:
    """Statistics (mean, bootstrap 95% CI, Mann-Whitney U), PNG plots and report.md of a results directory."""
    out = check_writable(results_dir, "RESULTS_DIR", directory=True)
    rows = load_rows(out)
    if not rows:
        raise EaslurmError(f"{out}: no run records under {out}/runs")
    files = build_report(out, title=title, html_too=html_too, n_boot=n_boot, seed=seed)
    if as_json:
        click.echo(dumps(stats_document(rows, n_boot=n_boot, seed=seed)))
    click.echo(f"{files.markdown} ({len(rows)} runs, {len(files.plots)} plots)")
