"""`easlurm sim run`: one simulation of one policy on one scenario and seed."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import click

from easlurm.cli import FiniteFloat, int_range, load_ctx_config, output_options
from easlurm.model.build import apply_oracle_config
from easlurm.model.cli import HARDWARE_OPTION
from easlurm.priority.policies import policy_params
from easlurm.sim.jobs_yaml import load_jobs
from easlurm.sim.power_saving_cli import POWER_SAVING_OPTIONS, power_saving_overrides
from easlurm.sim.runner import SimResult, SimSpec, run_simulation
from easlurm.units import format_energy, parse_duration_s, parse_power_w

#: rows of the human summary: (label, metric key, format string or function); energies in J with an SI
#: prefix, as every command prints them
_SUMMARY: tuple[tuple[str, str, str | Callable[[float], str]], ...] = (
    ("Completed jobs", "completed_jobs", "{:.0f}"),
    ("Throughput (jobs/h)", "throughput_jobs_per_h", "{:.2f}"),
    ("Energy", "energy_j", format_energy),
    ("  busy", "busy_energy_j", format_energy),
    ("  idle", "idle_energy_j", format_energy),
    ("  off", "off_energy_j", format_energy),
    ("  power cycles", "cycle_energy_j", format_energy),
    ("Energy per job", "energy_per_job_j", format_energy),
    ("Mean JCT (s)", "mean_jct_s", "{:.0f}"),
    ("P95 JCT (s)", "p95_jct_s", "{:.0f}"),
    ("Deadline miss rate", "deadline_miss_rate", "{:.3f}"),
    ("Jain index (user JCT)", "jain_index", "{:.3f}"),
    ("Max power (W)", "max_power_w", "{:.0f}"),
    ("Power budget (W)", "power_budget_w", "{:.0f}"),
    ("Time over budget (s)", "time_over_budget_s", "{:.0f}"),
    ("Preemptions", "preemptions", "{:.0f}"),
    ("Preempted energy", "preempted_energy_j", format_energy),
    ("Power cycles", "power_cycles", "{:.0f}"),
    ("Min cycle gap (s)", "min_cycle_gap_s", "{:.0f}"),
    ("Node-h powered down", "off_node_h", "{:.2f}"),
    ("Resume waits (jobs)", "resume_waits", "{:.0f}"),
    ("Events", "events", "{:.0f}"),
    ("Wall time (s)", "wall_s", "{:.3f}"),
)


#: rows shown only when power saving is on
_POWER_SAVING_ROWS = {
    "off_energy_j",
    "cycle_energy_j",
    "power_cycles",
    "min_cycle_gap_s",
    "off_node_h",
    "resume_waits",
}


def _param(value: str) -> tuple[str, Any]:
    key, sep, raw = value.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"expected KEY=VALUE, got {value!r}")
    import yaml

    parsed = yaml.safe_load(raw)
    return key.strip(), tuple(parsed) if isinstance(parsed, list) else parsed


@click.command("run")
@click.option("--policy", required=True, help="Policy name (pollux, zeus, hades, aurachronos, charon, ...).")
@click.option(
    "--scenario",
    default="B",
    show_default=True,
    help="Scenario: A, B, C, D, E, charon-budget, coloc-small, coloc-large.",
)
@click.option("--seed", type=int_range(), default=0, show_default=True)
@click.option(
    "--load",
    "load",
    type=FiniteFloat(min=0, min_open=True, max=1e5),
    default=None,
    help="Arrival rate in jobs/h (default: the scenario's).",
)
@click.option("--hours", type=float, default=None, help="Simulated hours [sim.hours].")
@click.option(
    "--power-budget",
    "--budget",
    "budget",
    default=None,
    help="Cluster power budget, e.g. 4500W [sched.power_budget_w].",
)
@click.option(
    "--cluster", "cluster", default=None, help="Cluster YAML [sim.cluster]; default 8xA100 + 8xH100."
)
@click.option(
    "--noise-sigma",
    "--noise",
    "noise",
    type=float,
    default=None,
    help="Oracle noise sigma [sim.noise_sigma].",
)
@click.option("--checkpoint-interval", default=None, help="Checkpoint every DURATION (default: none).")
@click.option("--param", "params", multiple=True, help="Policy parameter KEY=VALUE (repeatable).")
@click.option(
    "--job-list",
    "jobs_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Job list YAML to run instead of the scenario's workload (see docs/colocation.md).",
)
@POWER_SAVING_OPTIONS
@output_options(table=False, json_help="One JSON document (metrics, power series, jobs).")
@HARDWARE_OPTION
@click.pass_context
def run_cmd(
    ctx: click.Context,
    hardware_path: str | None,
    policy: str,
    scenario: str,
    seed: int,
    load: float | None,
    hours: float | None,
    budget: str | None,
    cluster: str | None,
    noise: float | None,
    checkpoint_interval: str | None,
    params: tuple[str, ...],
    jobs_file: str | None,
    as_json: bool,
    **saving: str | None,
) -> None:
    """Simulate POLICY on a scenario's workload and print its metrics."""
    cfg = load_ctx_config(
        ctx,
        {
            "sim": {
                "hours": hours,
                "cluster": cluster,
                "noise_sigma": noise,
                "checkpoint_interval_s": parse_duration_s(checkpoint_interval, "--checkpoint-interval")
                if checkpoint_interval
                else None,
            },
            "sched": {"power_budget_w": parse_power_w(budget, "--power-budget") if budget else None},
        },
        {
            "sim.hours": "--hours",
            "sim.noise_sigma": "--noise-sigma",
            "sim.checkpoint_interval_s": "--checkpoint-interval",
        },
    )
    apply_oracle_config(cfg, hardware_path)
    sim, sched = cfg.section("sim"), cfg.section("sched")
    merged = {**policy_params(policy, sched), **dict(_param(p) for p in params)}
    spec = SimSpec(
        policy=policy.lower(),
        scenario=scenario,
        seed=seed,
        load_jobs_per_h=load,
        hours=float(sim["hours"]),
        power_budget_w=sched["power_budget_w"],
        cluster=sim["cluster"],
        noise_sigma=float(sim["noise_sigma"]),
        checkpoint_interval_s=sim["checkpoint_interval_s"],
        policy_params=tuple(sorted(merged.items())),
        power_saving=power_saving_overrides(saving),
    )
    jobs = load_jobs(jobs_file) if jobs_file is not None else None
    result = run_simulation(spec, jobs)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
        return
    _print_summary(result, spec, jobs_file)


def _print_summary(result: SimResult, spec: SimSpec, jobs_file: str | None) -> None:
    """The human summary: what ran, then one metric a line (power-saving rows only with it on)."""
    m = result.metrics
    source = f"jobs {jobs_file}" if jobs_file else f"scenario {spec.scenario}"
    click.echo(f"policy {spec.policy}  {source}  seed {spec.seed}  {spec.hours:g} h")
    for label, key, fmt in _SUMMARY:
        value = m.get(key, math.nan)
        text = "" if value != value else fmt(value) if callable(fmt) else fmt.format(value)
        if key in _POWER_SAVING_ROWS and not math.isfinite(m.get("suspend_time_s", math.nan)):
            continue
        click.echo(f"{label:<24} {text}")
    for key in sorted(k for k in m if k.startswith("util_")):
        click.echo(f"{'Utilisation ' + key[5:]:<24} {m[key]:.3f}")
    shares = "  ".join(f"{u}={s:.2f}" for u, s in result.user_gpu_share.items())
    click.echo(f"{'User GPU-s shares':<24} {shares}")
