"""`easlurm seff JOBID`: the job card (energy by device, power against limits, requeues, idle GPUs, what-ifs)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from easlurm.accounting.notes import Note, NoteRules, card_figures, efficiency_notes, render_notes
from easlurm.accounting.sacct_rows import build_rows
from easlurm.accounting.seff import GpuLimits, build_card, card_document, parse_spec_quiet
from easlurm.accounting.whatif import Advice, Placement, advise, what_ifs
from easlurm.cli import load_ctx_config, output_options
from easlurm.energy.result import sum_known
from easlurm.errors import ConfigError, EaslurmError
from easlurm.slurm.gres import parse_gres
from easlurm.slurm.sacct_jobs import FIELDS, job_of_row
from easlurm.slurm.sched_client import CliSchedClient
from easlurm.table import render_table
from easlurm.units import format_duration, format_edp, format_energy, format_power, format_si

log = logging.getLogger(__name__)


def gpu_limits(catalogue: Any, slurm_types: Sequence[str]) -> dict[str, Any]:
    """{Slurm GPU type: GpuLimits} for the types the catalogue knows (TDP as the limit, idle draw)."""
    out = {}
    for t in slurm_types:
        if t and t in catalogue:
            spec = catalogue.get(t)
            out[t] = GpuLimits(spec.key, float(spec.tdp_w), float(spec.idle_w))
    return out


def cluster_gpu_types(client: Any) -> list[str]:
    """The GPU types of the cluster's nodes (`sinfo %G`); [] when sinfo cannot tell."""
    try:
        text = client.run(["sinfo", "-h", "-o", "%G"])
    except EaslurmError as exc:
        log.info("sinfo: %s", exc)
        return []
    return sorted(
        {i.type for line in text.splitlines() for i in parse_gres(line) if i.name == "gpu" and i.type}
    )


def node_gpu_types(client: Any) -> dict[str, str | None]:
    """{node: the GPU type of its GRES} from the Slurm client's node list (`sinfo --json` on 22.05,
    `scontrol --json show nodes` later); {} when Slurm cannot tell."""
    try:
        return {n.name: n.gpu_type for n in client.nodes()}
    except EaslurmError as exc:
        log.info("nodes: %s", exc)
        return {}


def _e(v: float | None) -> str:
    return format_energy(v) or "-"


def _p(v: float | None) -> str:
    return format_power(v) or "-"


def _memory(d: Any) -> str:
    """A GPU's peak memory in use of its total ("31.20GB/80.00GB"), "-" where not measured."""
    if d is None or d.peak_memory_bytes is None:
        return "-"
    total = "" if d.memory_total_bytes is None else f"/{format_si(d.memory_total_bytes, 'B')}"
    return f"{format_si(d.peak_memory_bytes, 'B')}{total}"


def render_card(
    card: Any,
    whatifs: Sequence[Any],
    whatif_note: str | None,
    per_device: bool = False,
    advice: Advice | None = None,
    notes: Sequence[Note] = (),
) -> str:
    """The card as text: a header, the advice (the best what-if within the site's slowdown bound), totals,
    one row per step, node and device kind (per device with `per_device`; power columns are per device:
    mean of means, highest peak; Util is the mean GPU utilisation, PeakMem the fullest GPU's peak memory of
    its total), then every what-if."""
    lines = _header_lines(card)
    if advice is not None:
        lines.append(f"Advice: {advice.text}")
    if not card.has_records:
        lines.append(
            "no energy records (the job was not submitted with --energy-profile, or its agents wrote none)"
        )
        if card.earlier_runs_j:
            lines.append(f"Earlier runs (requeue): {_e(card.requeue_energy_j)}")
        return "\n".join(lines)
    lines += _totals_lines(card)
    lines += render_notes(notes)
    lines.append("")
    cols = ["Step", "Node", "Device", "Energy", "MeanPower", "PeakPower", "Limit", "Util", "PeakMem", "Flags"]
    lines.append(render_table(cols, _device_rows(card, per_device)))
    if whatifs or whatif_note:
        lines.append("")
        lines.append(
            "What if (oracle; same work, changes against the oracle's own figure for this placement):"
        )
        lines.extend(f"  {w.line()}" for w in whatifs)
        if whatif_note:
            lines.append(f"  {whatif_note}")
    return "\n".join(lines)


def _header_lines(card: Any) -> list[str]:
    """Who ran the job, where, on which GPUs (or shards of one), which run of a requeued job, its SPEC."""
    gpus = f"{card.n_gpus} x {card.gpu_type or 'gpu'}" if card.n_gpus else "none"
    if card.shards:
        shared = f"{card.shards} shard{'s' if card.shards > 1 else ''} of one {card.gpu_type or 'GPU'}"
        gpus = shared if not card.n_gpus else f"{gpus} ({card.shards} shards)"
    elapsed = "-" if card.elapsed_s is None else f"{card.elapsed_s:.0f}s"
    lines = [
        f"Job {card.job_id} ({card.name})  user {card.user}  account {card.account}  partition {card.partition}",
        f"State {card.state}  Elapsed {elapsed}  Nodes {card.nnodes} ({card.nodelist})  GPUs {gpus}"
        + (f"  Run {card.run + 1} of {card.runs} (restart {card.run})" if card.runs > 1 else ""),
    ]
    if card.spec:
        lines.append(f"SPEC {card.spec}")
    return lines


def _totals_lines(card: Any) -> list[str]:
    """The job's totals: energy by kind, mean power and EDP, energy per step of work, the energy lost to
    requeues and the idle allocated GPUs (the card's headline), then the card's notes."""
    lines = []
    modelled = f" (modelled: {', '.join(card.modelled)})" if card.modelled else ""
    lines.append(
        f"Energy {_e(card.total_energy_j)} = GPU {_e(card.gpu_energy_j)} + CPU {_e(card.cpu_energy_j)} + "
        f"DRAM {_e(card.dram_energy_j)}{modelled}"
    )
    lim = "" if card.limits is None else f" (GPU limit {card.limits.limit_w:g} W each)"
    edp = "-" if card.edp_j_s is None else format_edp(card.edp_j_s)
    lines.append(f"Mean power {_p(card.mean_power_w)}{lim}  EDP {edp}")
    if card.work_steps is not None:
        lines.append(
            f"Per step of work ({card.work_steps} steps): {_e(card.energy_per_work_step_j)} "
            f"(GPU {_e(card.gpu_energy_per_work_step_j)})"
        )
    if card.earlier_runs_j:
        per = ", ".join(f"run {i}: {_e(v)}" for i, v in enumerate(card.earlier_runs_j, start=1))
        lines.append(f"Earlier runs (requeue): {_e(card.requeue_energy_j)} ({per})")
    if card.idle_episodes is not None and card.n_gpus:
        lines.extend(episode_lines(card.idle_episodes))
    elif card.limits is None and card.n_gpus:
        lines.append("Idle allocated GPUs: unknown (GPU type not in the catalogue)")
    elif card.n_gpus:
        idle = ", ".join(f"{d.device}@{d.host} ({_p(d.mean_power_w)})" for d in card.idle_gpus)
        lines.append(f"Idle allocated GPUs: {idle or 'none'}")
    lines.extend(card.notes)
    return lines


def episode_lines(episodes: Sequence[Any]) -> list[str]:
    """The idle episodes the agents recorded, each with the energy it burned ("none" when there were none)."""
    if not episodes:
        return ["Idle allocated GPUs: none (no idle episode recorded)"]
    total = sum(e.energy_j or 0.0 for e in episodes)
    lines = [f"Idle allocated GPUs: {len(episodes)} episode(s), {_e(total)} burned idle"]
    for e in episodes:
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(e.start_s))
        end = time.strftime("%H:%M:%S", time.localtime(e.end_s))
        lines.append(f"  {e.gpu}@{e.host} {start}-{end} ({format_duration(e.duration_s)}): {_e(e.energy_j)}")
    return lines


def card_notes(cfg: Any, card: Any, whatifs: Sequence[Any], oracle_asked: bool) -> list[Note]:
    """The site's efficiency notes on a card (`notes.*`); none for a job without records."""
    if not card.has_records:
        return []
    return efficiency_notes(card_figures(card), NoteRules.from_config(cfg), whatifs, oracle_asked)


def _device_rows(card: Any, per_device: bool) -> list[dict[str, str]]:
    """One table row per step, node and device kind (per device with `per_device`); a sub-domain, a
    modelled device and a shared GPU get rows of their own, so their flags say what the figure is."""
    rows = []
    for s in card.steps:
        groups: dict[tuple[str, str, bool, str | None], list[Any]] = {}
        for d in s.devices:
            key = (
                d.host,
                d.kind if not per_device else d.device,
                d.modelled or not d.in_total,
                d.apportioned,
            )
            groups.setdefault(key, []).append(d)
        for devs in groups.values():
            d = devs[0]
            flags = [
                f for f in ("modelled" if d.modelled else "", "sub-domain" if not d.in_total else "") if f
            ]
            if d.apportioned and d.share is None:  # shared, but its share could not be told (shared-unknown)
                flags.append(d.apportioned)
            elif d.apportioned:
                flags.append(f"shared:{100 * d.share:.0f}%")
            means = [x.mean_power_w for x in devs if x.mean_power_w is not None]
            peaks = [x.peak_power_w for x in devs if x.peak_power_w is not None]
            utils = [x.mean_util_pct for x in devs if x.mean_util_pct is not None]
            fullest = max(
                (x for x in devs if x.peak_memory_bytes is not None),
                key=lambda x: x.peak_memory_bytes or 0,
                default=None,
            )
            rows.append(
                {
                    "Step": s.step,
                    "Node": d.host,
                    "Device": d.device if len(devs) == 1 else f"{len(devs)}x{d.kind}",
                    "Energy": _e(sum_known(x.energy_j for x in devs)),
                    "MeanPower": _p(sum(means) / len(means) if means else None),
                    "PeakPower": _p(max(peaks) if peaks else None),
                    "Limit": _p(d.limit_w),
                    "Util": f"{sum(utils) / len(utils):.0f}%" if utils else "-",
                    "PeakMem": _memory(fullest),
                    "Flags": ",".join(flags) or "measured",
                }
            )
    return rows


def compute_whatifs(
    ctx: click.Context, card: Any, cluster_types: Sequence[str]
) -> tuple[list[Any], str | None]:
    """The what-ifs of a card with a declared model, or ([], why not)."""
    from easlurm.model.build import apply_oracle_config, build_oracle  # here: numpy

    spec = parse_spec_quiet(card.spec)
    if spec.model is None:
        return [], None
    if not spec.batch:
        return [], "no what-if: the SPEC declares no batch (batch=N)"
    cfg = load_ctx_config(ctx)
    catalogue = apply_oracle_config(cfg)
    if card.shards and not card.gpu_type:
        return [], "no what-if: the GPU type of a shard job's node is unknown"
    if not card.gpu_type or card.gpu_type not in catalogue:
        return [], f"no what-if: GPU type {card.gpu_type or '(none)'} is not in the oracle's catalogue"
    oracle = build_oracle(cfg.get("oracle.params"), cfg.get("oracle.hardware"))
    key = catalogue.resolve(card.gpu_type)
    n = max(1, card.n_gpus)
    others = [catalogue.resolve(t) for t in cluster_types if t in catalogue]
    # shards: the GPU was shared (time-sliced) with another job, as like this one as the oracle can assume
    sharing = "time-slice" if card.shards and not card.n_gpus else None
    try:
        out = what_ifs(
            oracle,
            spec,
            Placement(key, n, spec.batch[0], sharing=sharing, n_nodes=max(1, min(card.nnodes or 1, n))),
            others,
            elapsed_s=card.elapsed_s,
            gpu_energy_j=card.gpu_energy_j,
        )
    except EaslurmError as exc:
        return [], f"no what-if: {exc}"
    return out, None if out else "no what-if: the work does not fit its own placement in the oracle"


@click.command(
    "seff",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="The energy card of a finished job from its accounting records: energy by device per step and node, "
    "mean and peak power against the GPUs' limit, energy per step of work, EDP, the energy of earlier runs "
    "(requeues), GPUs allocated but idle, and for a job whose SPEC declares model= and batch= the oracle's "
    "what-if (fewer or more GPUs, a power limit, another GPU type of the cluster, sharing the GPU).",
)
@click.argument("job_id")
@click.option(
    "--run",
    "run",
    type=click.IntRange(min=1),
    default=None,
    help="Show this run of a requeued job, 1 for the first (default: the last).",
)
@output_options(table=False, json_help="One JSON document (SI units in key names).")
@click.option("--no-whatif", is_flag=True, help="Leave the oracle's what-if out.")
@click.option("--devices", "per_device", is_flag=True, help="One row per device (default: per device kind).")
@click.option(
    "--spool",
    type=click.Path(file_okay=False),
    default=None,
    help="Also read step records from this spool (default: spank.spool).",
)
@click.option("--no-spool", is_flag=True, help="Use AdminComment only.")
@click.option("--debug", is_flag=True, help="Echo Slurm commands and their raw output on stderr.")
@click.pass_context
def seff_cmd(
    ctx: click.Context,
    job_id: str,
    run: int | None,
    as_json: bool,
    no_whatif: bool,
    per_device: bool,
    spool: str | None,
    no_spool: bool,
    debug: bool,
) -> None:
    if not job_id.isdigit():
        raise ConfigError(f"seff: JOBID must be a job number, got {job_id[:40]!r}")
    cfg = load_ctx_config(ctx)  # a bad setting (notes.*, a file, EASLURM_*) stops here, before Slurm is asked
    client = CliSchedClient(debug=debug, echo=lambda msg: click.echo(msg, err=True))
    rows = client.sacct(["--jobs", job_id, "--duplicates"], list(FIELDS))
    rows = [r for r in rows if r["JobIDRaw"].split(".")[0] == job_id]
    if not rows:
        raise ConfigError(f"seff: job {job_id} is not in the accounting records")
    spool_dir = None if no_spool else Path(spool or cfg.get("spank.spool"))
    view = card_view(ctx, client, job_id, rows, spool_dir, run, no_whatif)
    if as_json:
        click.echo(json.dumps(view.document(), indent=1))
        return
    click.echo(view.text(per_device))


@dataclass
class CardView:
    """A job's card with everything said about it: the oracle's what-ifs (or why none), the advice and the
    site's efficiency notes; `easlurm seff` prints it, the job-end mail sends it."""

    card: Any
    whatifs: list[Any]
    whatif_note: str | None
    advice: Advice | None
    notes: list[Note]

    def text(self, per_device: bool = False) -> str:
        return render_card(self.card, self.whatifs, self.whatif_note, per_device, self.advice, self.notes)

    def document(self) -> dict[str, Any]:
        doc = card_document(self.card, self.whatifs, self.whatif_note)
        doc["advice"] = None if self.advice is None else advice_document(self.advice)
        doc["efficiency_notes"] = [n.to_dict() for n in self.notes]
        return doc


def card_view(
    ctx: click.Context,
    client: Any,
    job_id: str,
    rows: list[dict[str, str]],
    spool_dir: Path | None,
    run: int | None = None,
    no_whatif: bool = False,
    cluster_types: Sequence[str] | None = None,
) -> CardView:
    """The card of one job from its sacct rows (`--duplicates`, every run) and the records in AdminComment
    and the spool. `cluster_types`: the cluster's GPU types when the caller already asked sinfo."""
    from easlurm.model.build import apply_oracle_config  # here: numpy

    cfg = load_ctx_config(ctx)
    _, records = build_rows(rows, None, spool_dir, duplicates=True)
    jobs = [job_of_row(r, strict=False) for r in rows]
    types = {j.alloc_gpus[1] or "" for j in jobs}
    # shards name no GPU type in AllocTRES: ask Slurm for the nodes' GRES (only then)
    by_node = node_gpu_types(client) if any(j.shards and not j.alloc_gpus[1] for j in jobs) else {}
    types |= {t for t in by_node.values() if t}
    limits = gpu_limits(apply_oracle_config(cfg), sorted(types))
    card = build_card(
        rows, records.get(job_id, []), limits, None if run is None else run - 1, node_gpu_types=by_node
    )
    whatifs: list[Any] = []
    note = None
    if card.has_records and not no_whatif:
        others = cluster_gpu_types(client) if cluster_types is None else cluster_types
        whatifs, note = compute_whatifs(ctx, card, others)
    advice = advise(whatifs, float(cfg.get("sched.max_slowdown")))
    notes = card_notes(cfg, card, whatifs, bool(whatifs))
    return CardView(card, whatifs, note, advice, notes)


def advice_document(advice: Advice) -> dict[str, Any]:
    """The `--json` advice: the chosen what-if's label (None: keep the placement), the bound, the words."""
    return {
        "label": None if advice.best is None else advice.best.label,
        "max_slowdown": advice.max_slowdown,
        "text": advice.text,
    }
