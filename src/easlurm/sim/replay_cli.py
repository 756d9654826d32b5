"""`easlurm sim replay TRACE`: replay a recorded trace through policies and report against the recorded schedule."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import click

from easlurm.cli import FiniteFloat, int_range, load_ctx_config
from easlurm.errors import ConfigError, TraceError
from easlurm.files import check_writable, reading
from easlurm.model.build import apply_oracle_config
from easlurm.model.cli import HARDWARE_OPTION
from easlurm.priority.policies import POLICY_NAMES, known_policy
from easlurm.progress import progressbar
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.power_saving_cli import POWER_SAVING_OPTIONS, power_saving_overrides
from easlurm.sim.replay import ReplayRequest, replay, write_replay_report
from easlurm.sim.traces.mapping import ReplayOptions
from easlurm.units import parse_power_w

DEFAULT_POLICIES = "pollux,zeus,hades,aurachronos,charon"


@click.command("replay")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--cluster",
    "cluster_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Cluster YAML (default: sim.cluster setting, else a cluster sized like the trace's own record).",
)
@click.option(
    "--policies",
    default=DEFAULT_POLICIES,
    show_default=True,
    help="Comma list of policies; NAME+power-saving runs NAME with Slurm's power saving on.",
)
@click.option("--power-budget", "power_budget", default=None, help="Cluster power budget, e.g. 4500W.")
@click.option(
    "-O", "--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Report directory."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "sacct", "sacct-json", "swf", "csv"]),
    default="auto",
    show_default=True,
    help="Trace format (auto: from suffix and content).",
)
@click.option(
    "--skip-bad", is_flag=True, help="Skip malformed records (counted in the report) instead of stopping."
)
@click.option(
    "--columns", default=None, help="Columns of a sacct -P dump made with --noheader (its --format)."
)
@click.option(
    "--delimiter",
    default=None,
    help="Field delimiter of a dump made with sacct --delimiter=STR (default '|'; implies --format sacct).",
)
@click.option(
    "--procs-per-gpu",
    type=int_range(1, 1 << 20),
    default=None,
    help="SWF: processors per GPU (required for an SWF log without a ProcsPerGPU header, unless --cluster).",
)
@click.option(
    "--seed",
    type=int_range(),
    default=0,
    show_default=True,
    help="First seed of the policy-side oracle noise.",
)
@click.option(
    "--seeds",
    "n_seeds",
    type=int_range(1, 1000),
    default=1,
    show_default=True,
    help="Seeds per policy (seed, seed+1, ...): confidence intervals in the report.",
)
@click.option(
    "--noise-sigma", type=float, default=None, help="Policy-side oracle noise (default: sim.noise_sigma)."
)
@click.option(
    "--deadline-slack",
    type=FiniteFloat(min=0, min_open=True),
    default=None,
    help="Give jobs a deadline of submit + SLACK x time limit (off by default).",
)
@click.option(
    "--malleable", is_flag=True, help="Let policies resize jobs (half to double the recorded GPUs)."
)
@click.option(
    "--free-gpu-type", is_flag=True, help="Let policies place jobs on any GPU type, not the one requested."
)
@click.option(
    "--allow-retype",
    is_flag=True,
    help="Let policies move jobs whose GPU type the trace does not say (pinned to the assumed type by default).",
)
@click.option(
    "--compare-retype",
    is_flag=True,
    help="Run each policy twice: unknown GPU types pinned, and free to move (rows NAME+retype).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: if a tty).")
@click.option(
    "--no-calibrate", is_flag=True, help="Do not scale the oracle's power to the trace's measured energy."
)
@click.option("--max-jobs", type=int_range(1), default=None, help="Replay only the first N usable jobs.")
@click.option(
    "--queue-depth",
    type=int_range(1, 10_000_000),
    default=None,
    help="Pending jobs each scheduling decision sees, in queue order, as Slurm's default_queue_depth "
    "(default: sim.queue_depth, 1000).",
)
@click.option(
    "--max-slowdown",
    type=FiniteFloat(min=0, max=10),
    default=None,
    help="Slowdown the energy policies' power limits may cost a job (default: sched.max_slowdown).",
)
@click.option(
    "--compare-limits",
    is_flag=True,
    help="Also run each energy policy without power limits (rows NAME+nolimit): the report splits the "
    "saving into limits and placement.",
)
@click.option(
    "--baselines",
    is_flag=True,
    help="Also run what a site does today: slurm, static-cap-50..90 and slurm+power-saving (the report "
    "compares every policy with them).",
)
@click.option("--html/--no-html", "html_too", default=True, show_default=True, help="Also write report.html.")
@POWER_SAVING_OPTIONS
@HARDWARE_OPTION
@click.pass_context
def replay_cmd(ctx: click.Context, **params: Any) -> None:
    """Replay TRACE (sacct -P or --json dump, SWF, CSV) through POLICIES; the trace's own schedule is the baseline."""
    args = ReplayArgs.of(params)
    check_writable(args.out_dir, "--out", directory=True)
    cfg = load_ctx_config(
        ctx,
        {
            "sim": {
                "cluster": args.cluster_path,
                "noise_sigma": args.noise_sigma,
                "queue_depth": args.queue_depth,
            },
            "sched": {"max_slowdown": args.max_slowdown},
        },
        {
            "sim.noise_sigma": "--noise-sigma",
            "sched.max_slowdown": "--max-slowdown",
            "sim.queue_depth": "--queue-depth",
        },
    )
    apply_oracle_config(cfg, args.hardware_path)
    names = _policy_names(args.policies)
    request = _request(args, cfg, names)
    with reading(args.trace, "trace", TraceError):
        result = replay(request)
    md = write_replay_report(result, args.out_dir, html_too=args.html_too)
    st = result.trace_stats
    not_replayed = sum(result.mapping.excluded.values()) + sum(st.excluded.values())
    click.echo(
        f"{result.mapping.mapped} of {st.jobs} jobs replayed under {len(names)} policies "
        + ("and the site baselines " if args.baselines else "")
        + f"({st.skipped_bad} malformed skipped, {not_replayed} not replayed, by reason in the report)"
        + ("; reading stopped at --max-jobs" if st.stopped_early else "")
        + f"; report: {md}"
    )


@dataclass(frozen=True)
class ReplayArgs:
    """The command's options as click passes them: one value instead of 27 parameters."""

    hardware_path: str | None
    trace: str
    cluster_path: str | None
    policies: str
    power_budget: str | None
    out_dir: str
    fmt: str
    skip_bad: bool
    columns: str | None
    delimiter: str | None
    procs_per_gpu: int | None
    seed: int
    n_seeds: int
    noise_sigma: float | None
    deadline_slack: float | None
    malleable: bool
    free_gpu_type: bool
    allow_retype: bool
    compare_retype: bool
    progress: bool | None
    no_calibrate: bool
    max_jobs: int | None
    queue_depth: int | None
    max_slowdown: float | None
    compare_limits: bool
    baselines: bool
    html_too: bool
    #: the power-saving flags (`ps_<field>`, power_saving_cli)
    saving: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def of(cls, params: dict[str, Any]) -> ReplayArgs:
        saving = {k: v for k, v in params.items() if k.startswith("ps_")}
        return cls(**{k: v for k, v in params.items() if k not in saving}, saving=saving)


def _policy_names(policies: str) -> list[str]:
    """The --policies list, lower case; ConfigError names the unknown ones."""
    names = [p.strip().lower() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if not known_policy(p.removesuffix("+power-saving"))]
    if unknown or not names:
        raise ConfigError(
            f"--policies: unknown {', '.join(unknown) or '(empty)'} "
            f"(known: {', '.join(POLICY_NAMES)}, static-cap-NN, "
            "any of them +power-saving)"
        )
    return names


def _request(args: ReplayArgs, cfg: Any, names: list[str]) -> ReplayRequest:
    """The replay the options ask for, the effective configuration filling what they leave out."""
    cluster_file = cfg.get("sim.cluster")
    cluster = ClusterSpec.from_yaml(cluster_file) if cluster_file else None
    budget = parse_power_w(args.power_budget, "--power-budget") if args.power_budget else None
    options = ReplayOptions(
        honor_gpu_type=not args.free_gpu_type,
        allow_retype=args.allow_retype,
        malleable=args.malleable,
        deadline_slack=args.deadline_slack,
        max_jobs=args.max_jobs,
    )
    trace_options = _trace_options(args)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    return ReplayRequest(
        args.trace,
        cluster,
        names,
        fmt=args.fmt,
        skip_bad=args.skip_bad,
        power_budget_w=budget,
        seed=args.seed,
        seeds=list(range(args.seed, args.seed + args.n_seeds)),
        noise_sigma=float(cfg.get("sim.noise_sigma")),
        options=options,
        calibrate=not args.no_calibrate,
        on_progress=_report_line if show else None,
        trace_options=trace_options,
        compare_retype=args.compare_retype and not args.allow_retype,
        progress_bar=_bar if show else None,
        on_notice=_notice_line,
        max_slowdown=float(cfg.get("sched.max_slowdown")),
        queue_depth=int(cfg.get("sim.queue_depth")),
        compare_limits=args.compare_limits,
        baselines=args.baselines,
        power_saving=power_saving_overrides(args.saving),
        cluster_source=(
            None
            if not cluster_file
            else f"--cluster {cluster_file}"
            if args.cluster_path
            else f"the sim.cluster setting ({cluster_file})"
        ),
    )


def _trace_options(args: ReplayArgs) -> dict[str, Any]:
    """What the trace reader needs beyond the file: processors per GPU, a delimiter, headerless columns."""
    trace_options: dict[str, Any] = (
        {} if args.procs_per_gpu is None else {"procs_per_gpu": args.procs_per_gpu}
    )
    if args.delimiter is not None:
        if not args.delimiter:
            raise ConfigError("--delimiter: empty")
        trace_options["delimiter"] = args.delimiter
    if args.columns is not None:
        if not args.columns.strip(", "):
            raise ConfigError(
                "--columns: empty (give the dump's sacct --format, e.g. JobID,Submit,Start,End)"
            )
        trace_options["columns"] = [c.strip() for c in args.columns.split(",")]
    return trace_options


def _report_line(line: str) -> None:
    click.echo(f"replay: {line}", err=True)


def _notice_line(line: str) -> None:
    click.echo(f"replay: note: {line}", err=True)


def _bar(jobs: Iterator[Any], n: int, label: str) -> Iterator[Any]:
    stderr = sys.stderr
    with progressbar(jobs, length=n, label=f"replay {label}", file=stderr) as it:
        yield from it
