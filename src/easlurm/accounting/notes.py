"""Efficiency notes: the rules a site turns on (`notes.*`), each an explanation of a job's waste with its evidence.

Pure: a run's GPU figures (the card's device lines, idle episodes) and the oracle's what-ifs in, `Note`s out.
`easlurm seff`, the job-end card (`easlurm mail`) and `easlurm report --notes` all call `efficiency_notes`,
so the three say the same thing about a job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from easlurm.accounting.seff import DeviceLine, GpuLimits, IdleEpisode, JobCard
from easlurm.accounting.whatif import WhatIf
from easlurm.config import NOTE_RULES
from easlurm.units import format_duration, format_energy, format_power, format_si


@dataclass(frozen=True)
class NoteRules:
    """The rules on and their thresholds (the `notes` section; percentages as the settings give them)."""

    rules: tuple[str, ...] = NOTE_RULES
    low_gpu_util_pct: float = 25.0
    power_limit_peak_pct: float = 80.0
    placement_min_saving_pct: float = 10.0
    placement_max_slowdown_pct: float = 10.0
    memory_used_pct: float = 25.0
    idle_gpu_min_s: float = 60.0

    @classmethod
    def from_config(cls, cfg: Any) -> NoteRules:
        section = cfg.section("notes")
        rules = tuple(r for r in str(section.pop("rules") or "").split(",") if r)
        return cls(rules=rules, **{k: float(v) for k, v in section.items()})


@dataclass(frozen=True)
class Note:
    """One efficiency note: the rule that found it, what it says, and the figures it rests on."""

    rule: str
    text: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "text": self.text, "evidence": dict(self.evidence)}


@dataclass(frozen=True)
class RunFigures:
    """What the rules read about one run: its GPUs (not shared, measured), their limits, the agents' idle
    episodes (None: not recorded), the GPUs idle on average over the run, its window and GPU energy."""

    gpus: Sequence[DeviceLine]
    limits: GpuLimits | None
    episodes: Sequence[IdleEpisode] | None
    idle_gpus: Sequence[DeviceLine] = ()
    measured_s: float | None = None
    gpu_energy_j: float | None = None
    n_gpus: int = 0
    #: the catalogue key of the job's own GPU type: a what-if on another is "another GPU type"
    base_gpu: str | None = None


def card_figures(card: JobCard) -> RunFigures:
    """The rules' view of a job card's run."""
    return RunFigures(
        gpus=card.gpu_devices,
        limits=card.limits,
        episodes=card.idle_episodes,
        idle_gpus=card.idle_gpus,
        measured_s=card.measured_s,
        gpu_energy_j=card.gpu_energy_j,
        n_gpus=card.n_gpus,
        base_gpu=None if card.limits is None else card.limits.gpu_type,
    )


def _name(d: DeviceLine) -> str:
    return f"{d.device}@{d.host}"


def efficiency_notes(
    run: RunFigures, rules: NoteRules, whatifs: Sequence[WhatIf] = (), oracle_asked: bool = False
) -> list[Note]:
    """The notes the site's rules find in one run, in the order of NOTE_RULES. `oracle_asked`: what-ifs
    were computed (an empty list then means none fitted), so a rule that needs the oracle can say so."""
    found: dict[str, Note | None] = {
        "low_gpu_util": _low_util(run, rules),
        "power_limit": _power_limit(run, rules, whatifs, oracle_asked),
        "placement": _placement(run, rules, whatifs),
        "memory_unused": _memory(run, rules),
        "idle_gpus": _idle(run, rules),
    }
    return [n for r in NOTE_RULES if r in rules.rules and (n := found[r]) is not None]


def _own(run: RunFigures) -> list[DeviceLine]:
    """The GPUs the job held alone (a shared GPU's utilisation and memory are the whole GPU's)."""
    return [d for d in run.gpus if not d.apportioned]


def _low_util(run: RunFigures, rules: NoteRules) -> Note | None:
    utils = {_name(d): d.mean_util_pct for d in _own(run) if d.mean_util_pct is not None}
    if not utils:
        return None
    mean = sum(utils.values()) / len(utils)
    if mean >= rules.low_gpu_util_pct:
        return None
    lowest = min(utils, key=lambda k: utils[k])
    text = (
        f"low GPU utilisation: {mean:.0f} % on average over {len(utils)} GPU(s) (lowest {lowest} "
        f"{utils[lowest]:.0f} %), under the site's {rules.low_gpu_util_pct:g} % (notes.low_gpu_util_pct): "
        "the GPUs waited on data loading, the CPU or communication most of the time"
    )
    return Note(
        "low_gpu_util",
        text,
        {"mean_util_pct": mean, "threshold_pct": rules.low_gpu_util_pct, "util_pct_by_gpu": utils},
    )


def _limit_whatif(run: RunFigures, rules: NoteRules, whatifs: Sequence[WhatIf]) -> WhatIf | None:
    """The lower power limit that saves the most energy within the placement rule's slowdown."""
    slow = rules.placement_max_slowdown_pct / 100.0
    limits = [
        w
        for w in whatifs
        if w.placement.power_limit_w is not None and w.time_change <= slow and w.energy_change < 0
    ]
    return min(limits, key=lambda w: w.energy_change, default=None)


def _power_limit(
    run: RunFigures, rules: NoteRules, whatifs: Sequence[WhatIf], oracle_asked: bool
) -> Note | None:
    peaks = {_name(d): d.peak_power_w for d in _own(run) if d.peak_power_w is not None}
    if not peaks or run.limits is None:
        return None
    limit = run.limits.limit_w
    top = max(peaks.values())
    share = 100.0 * top / limit
    if share >= rules.power_limit_peak_pct:
        return None
    evidence: dict[str, Any] = {
        "peak_power_w": top,
        "limit_w": limit,
        "peak_share_pct": share,
        "threshold_pct": rules.power_limit_peak_pct,
    }
    text = (
        f"power limit never approached: the GPUs peaked at {format_power(top)} of their "
        f"{format_power(limit)} limit ({share:.0f} %, under the site's {rules.power_limit_peak_pct:g} %, "
        "notes.power_limit_peak_pct)"
    )
    best = _limit_whatif(run, rules, whatifs)
    if best is not None:
        evidence["whatif"] = best.to_dict()
        saved = "" if best.gpu_energy_j is None else f", GPU energy about {format_energy(best.gpu_energy_j)}"
        text += f"; the oracle: {best.line()}{saved}"
    elif oracle_asked:
        text += "; the oracle finds no lower limit that saves energy within the slowdown the site allows"
    else:
        at_peak = 25.0 * math.ceil(top / 25.0)
        evidence["limit_at_peak_w"] = at_peak
        text += (
            f"; a {at_peak:g} W limit would not have capped it (declare model= and batch= in the SPEC "
            "for the oracle's saving at a lower one)"
        )
    return Note("power_limit", text, evidence)


def _placement(run: RunFigures, rules: NoteRules, whatifs: Sequence[WhatIf]) -> Note | None:
    """Fewer GPUs, or another GPU type, for at least the minimum saving within the slowdown."""
    saving, slow = rules.placement_min_saving_pct / 100.0, rules.placement_max_slowdown_pct / 100.0
    fits = [
        w
        for w in whatifs
        if w.placement.power_limit_w is None
        and w.placement.sharing is None
        and (
            w.placement.n_gpus < run.n_gpus or (run.base_gpu is not None and w.placement.gpu != run.base_gpu)
        )
        and -w.energy_change >= max(saving, w.uncertainty or 0.0)
        and w.time_change <= slow
    ]
    best = min(fits, key=lambda w: (w.energy_change, w.time_change), default=None)
    if best is None:
        return None
    absolute = "" if best.gpu_energy_j is None else f" (GPU energy about {format_energy(best.gpu_energy_j)})"
    text = (
        f"cheaper placement: {best.line()}{absolute}: at least the site's {rules.placement_min_saving_pct:g} % "
        f"saving for at most {rules.placement_max_slowdown_pct:g} % more time "
        "(notes.placement_min_saving_pct, notes.placement_max_slowdown_pct)"
    )
    return Note("placement", text, {"whatif": best.to_dict(), "alternatives": len(fits)})


def _memory(run: RunFigures, rules: NoteRules) -> Note | None:
    known = [d for d in _own(run) if d.peak_memory_bytes is not None and d.memory_total_bytes]
    if not known:
        return None
    fullest = max(known, key=lambda d: (d.peak_memory_bytes or 0) / (d.memory_total_bytes or 1))
    used, total = fullest.peak_memory_bytes or 0, fullest.memory_total_bytes or 1
    share = 100.0 * used / total
    if share >= rules.memory_used_pct:
        return None
    text = (
        f"GPU memory mostly unused: the fullest GPU ({_name(fullest)}) peaked at {format_si(used, 'B')} of "
        f"{format_si(total, 'B')} ({share:.0f} %, under the site's {rules.memory_used_pct:g} %, "
        "notes.memory_used_pct): a larger batch, a GPU with less memory or a shard of one would do"
    )
    evidence = {"peak_memory_bytes": used, "memory_total_bytes": total, "used_pct": share}
    return Note("memory_unused", text, {**evidence, "threshold_pct": rules.memory_used_pct})


def _idle(run: RunFigures, rules: NoteRules) -> Note | None:
    """Recorded idle episodes (per GPU, at least the minimum in all); a record without them: GPUs at idle
    power over the whole run (the post-hoc check of the card)."""
    if run.episodes is not None:
        per: dict[str, list[IdleEpisode]] = {}
        for e in run.episodes:
            per.setdefault(f"{e.gpu}@{e.host}", []).append(e)
        idle = {k: v for k, v in per.items() if sum(e.duration_s for e in v) >= rules.idle_gpu_min_s}
        if not idle:
            return None
        parts: list[str] = []
        energy = 0.0
        gpus: dict[str, dict[str, Any]] = {}
        for k, eps in sorted(idle.items()):
            secs = sum(e.duration_s for e in eps)
            joules = sum(e.energy_j or 0.0 for e in eps)
            energy += joules
            gpus[k] = {"idle_s": secs, "episodes": len(eps), "energy_j": joules}
            parts.append(f"{k} {format_duration(secs)} in {len(eps)} episode(s), {format_energy(joules)}")
        how = "as the node agent recorded them (no process, near-zero utilisation)"
    else:
        long_enough = run.measured_s is not None and run.measured_s >= rules.idle_gpu_min_s
        if not run.idle_gpus or not long_enough:
            return None
        gpus = {_name(d): {"mean_power_w": d.mean_power_w, "energy_j": d.energy_j} for d in run.idle_gpus}
        energy = sum(d.energy_j or 0.0 for d in run.idle_gpus)
        parts = [f"{_name(d)} at {format_power(d.mean_power_w)} on average" for d in run.idle_gpus]
        how = "at idle power on average over the whole run (no idle episode recorded)"
    share = (
        "" if not run.gpu_energy_j else f", {100 * energy / run.gpu_energy_j:.0f} % of the job's GPU energy"
    )
    text = (
        f"idle allocated GPUs, {how}: {'; '.join(parts)}; {format_energy(energy)} burned{share}. "
        "Ask for the GPUs the job uses"
    )
    return Note(
        "idle_gpus",
        text,
        {
            "idle_energy_j": energy,
            "gpus": gpus,
            "threshold_s": rules.idle_gpu_min_s,
            "from_episodes": run.episodes is not None,
        },
    )


def idle_energy_j(run: RunFigures) -> float | None:
    """Energy of the run's idle allocated GPUs: the recorded episodes' sum, else the GPUs idle on average
    over the run (None without limits or records to tell)."""
    if run.episodes is not None:
        return sum(e.energy_j or 0.0 for e in run.episodes)
    if run.limits is None:
        return None
    return sum(d.energy_j or 0.0 for d in run.idle_gpus)


def render_notes(notes: Sequence[Note]) -> list[str]:
    """The card's `Notes:` block (none: no lines)."""
    if not notes:
        return []
    return ["Efficiency notes:", *(f"  - {n.text}" for n in notes)]
