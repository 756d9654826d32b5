"""Replay rows compared over one window, and where each policy's energy saving comes from.

Each run (the recorded schedule, every policy and seed) counts the idle power of the target cluster's GPUs
from time 0 to its own last end. A row whose last job ends later (the record, where a job waited days in
its real queue for reasons the trace does not show) then carries idle energy the others never count: a
"saving" that is only the recorded wait. `align` puts every row on the same window (time 0 to the latest
end of any row) and the same GPUs (the target cluster's): each row is charged from its own end to the
window's end what its nodes would draw, all empty: the whole cluster's idle power where nodes stay on
(the record, a run without power saving), and under Slurm's power saving each node's own rule (idle power
until SuspendTime after it emptied, idle power while it shuts down, then its off power). Busy energy
(jobs' power while they run) is untouched.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from easlurm.sim.replay_savings import MIN_JOBS
from easlurm.units import format_duration, format_energy, format_power

#: the run metrics that hold energy (J)
ENERGY_KEY, IDLE_KEY, BUSY_KEY, PER_JOB_KEY = "energy_j", "idle_energy_j", "busy_energy_j", "energy_per_job_j"
OFF_KEY, CYCLE_KEY = "off_energy_j", "cycle_energy_j"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _end(m: Mapping[str, Any]) -> float | None:
    """A run's last end: `makespan_s` of the record, `simulated_s` of a simulated run."""
    end = _num(m.get("makespan_s"))
    return end if end is not None else _num(m.get("simulated_s"))


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def tail_energy(
    nodes: Sequence[Mapping[str, Any]] | None, end_s: float, window_s: float, idle_total_w: float
) -> tuple[float, float, float, int]:
    """(idle, off, cycle J, power-downs) the run's nodes draw from `end_s` to `window_s`, all empty. A node
    row (sim/engine/power_state.py `per_node`) with `suspend_at_s` is powered down then, draws its idle
    power until `off_at_s` (shutdown: cycle energy) and its off power after; one without stays on. Without
    node rows (the record, whose nodes were on all along) the whole cluster stays on at `idle_total_w`."""
    span = max(window_s - end_s, 0.0)
    rows = [n for n in nodes or () if _num(n.get("on_w")) is not None]
    if not rows:
        return idle_total_w * span, 0.0, 0.0, 0
    idle = off = cycle = 0.0
    downs = 0
    for n in rows:
        on_w, off_w = float(n["on_w"]), _num(n.get("off_w")) or 0.0
        down, gone = _num(n.get("suspend_at_s")), _num(n.get("off_at_s"))
        if down is None or gone is None:
            idle += on_w * span
            continue
        if down >= end_s:  # a power-down the run did not reach (or reached at its very end)
            downs += down < window_s
        down = max(down, min(end_s, gone))
        idle += on_w * _overlap(end_s, window_s, -math.inf, down)
        cycle += on_w * _overlap(end_s, window_s, down, gone)
        off += off_w * _overlap(end_s, window_s, gone, math.inf)
    return idle, off, cycle, downs


def align(runs: Iterable[dict[str, Any]], idle_total_w: float) -> float | None:
    """Put every run's energy on one window (0 to the latest end of any run) over the same GPUs;
    returns the window's length (None when no run has an end). Each run's metrics gain `window_s`,
    `window_idle_added_j` (the energy added after its own end, all parts), `busy_energy_per_job_j` and
    `idle_energy_per_job_j`; energy, its idle, off and cycle parts, power cycles and energy per job are
    over the window (`tail_energy`: a run's `nodes` rows say how its nodes go on drawing). A run whose
    energy is blank (a record that does not fit the cluster) stays blank."""
    runs = list(runs)
    metrics = [r.setdefault("metrics", {}) for r in runs]
    ends = [e for m in metrics if (e := _end(m)) is not None]
    if not ends:
        return None
    window = max(ends)
    for run, m in zip(runs, metrics):
        end = _end(m)
        jobs = _num(m.get("completed_jobs")) or 0.0
        m["window_s"] = window
        busy = _num(m.get(BUSY_KEY))
        m["busy_energy_per_job_j"] = busy / jobs if busy is not None and jobs else None
        idle, total = _num(m.get(IDLE_KEY)), _num(m.get(ENERGY_KEY))
        if end is None or idle is None or total is None:
            m["window_idle_added_j"] = None
            m["idle_energy_per_job_j"] = None
            continue
        idle_j, off_j, cycle_j, downs = tail_energy(run.get("nodes"), end, window, idle_total_w)
        added_j = idle_j + off_j + cycle_j
        m["window_idle_added_j"] = added_j
        m[IDLE_KEY] = idle + idle_j
        for key, part in ((OFF_KEY, off_j), (CYCLE_KEY, cycle_j)):
            if part or _num(m.get(key)) is not None:
                m[key] = (_num(m.get(key)) or 0.0) + part
        if downs:
            m["power_cycles"] = (_num(m.get("power_cycles")) or 0.0) + downs
        m[ENERGY_KEY] = total + added_j
        m[PER_JOB_KEY] = m[ENERGY_KEY] / jobs if jobs else None
        m["idle_energy_per_job_j"] = m[IDLE_KEY] / jobs if jobs else None
        if window > 0:
            m["mean_power_w"] = m[ENERGY_KEY] / window
    return window


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def savings(
    rows: Sequence[tuple[str, Mapping[str, Any]]], baseline: str, nolimit_suffix: str = "+nolimit"
) -> list[dict[str, Any]]:
    """Per policy (mean over its seeds), the energy per job saved against `baseline` (J), split into busy
    and idle energy, and the busy part into power limits (the policy against its own run without limits,
    `NAME+nolimit`, where present), sharing (zeus-share against zeus) and placement (the rest of busy).
    The parts interact (a limit changes which placement is best), so the split is a first-order one."""
    by_label: dict[str, list[Mapping[str, Any]]] = {}
    for label, metrics in rows:
        by_label.setdefault(label, []).append(metrics)

    def per_job(label: str, key: str) -> float | None:
        return _mean([_num(m.get(key)) for m in by_label.get(label, [])])

    base_busy = per_job(baseline, "busy_energy_per_job_j")
    base_idle = per_job(baseline, "idle_energy_per_job_j")
    out = []
    for label in by_label:
        if label == baseline or label.endswith(nolimit_suffix):
            continue
        busy, idle = per_job(label, "busy_energy_per_job_j"), per_job(label, "idle_energy_per_job_j")
        row: dict[str, Any] = {"label": label, "busy_j": None, "idle_j": None, "limits_j": None}
        row.update({"sharing_j": None, "placement_j": None, "total_j": None})
        if base_busy is not None and busy is not None:
            row["busy_j"] = base_busy - busy
            unlimited = per_job(label + nolimit_suffix, "busy_energy_per_job_j")
            rest = row["busy_j"]
            if unlimited is not None:
                row["limits_j"] = unlimited - busy
                rest -= row["limits_j"]
            if label == "zeus-share" and (zeus := per_job("zeus", "busy_energy_per_job_j")) is not None:
                row["sharing_j"] = zeus - busy  # both choose limits: what co-location adds
                rest -= row["sharing_j"]
            row["placement_j"] = rest
        if base_idle is not None and idle is not None:
            row["idle_j"] = base_idle - idle
        if row["busy_j"] is not None and row["idle_j"] is not None:
            row["total_j"] = row["busy_j"] + row["idle_j"]
        out.append(row)
    return out


def _signed(joules: float | None) -> str:
    if joules is None:
        return ""
    return ("-" if joules < 0 else "") + format_energy(abs(joules))


def _saved_cell(r: Mapping[str, Any]) -> str:
    """The saving with its interval, or "no difference" (and why) where there is none to claim."""
    total, verdict = r.get("total_j"), r.get("verdict")
    if verdict is None or total is None:
        return _signed(total)
    if verdict == "too few jobs":
        jobs = int(r.get("jobs_paired") or 0)
        return f"no difference ({jobs} job{'s' if jobs != 1 else ''}: too few for an interval)"
    interval = f"[{_signed(r.get('ci_low_j'))}, {_signed(r.get('ci_high_j'))}]"
    if verdict == "no difference":
        return f"no difference ({_signed(total)}, 95% interval {interval})"
    return f"{_signed(total)} {interval}"


def savings_section(
    rows: Sequence[tuple[str, Mapping[str, Any]]],
    baseline: str,
    window_s: float | None,
    idle_total_w: float,
    n_gpus: int,
    unexplained: Sequence[Mapping[str, Any]],
    unexplained_jobs: int,
    unexplained_s: float,
    saved: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """Markdown: the common window, each policy's energy per job saved against the baseline and where it
    comes from, and the recorded waits no replay can explain. `saved` (default: `savings(rows, baseline)`)
    may carry each saving's interval (`ci_low_j`, `ci_high_j`, `jobs_paired`, `verdict`): a saving is
    then shown with it, and as "no difference" where the interval holds zero or the jobs are too few."""
    lines = ["", "## Where the energy goes", ""]
    if window_s is None:
        return "\n".join([*lines, "No row has an end: nothing to compare.", ""])
    lines.append(
        f"Every row's energy is counted over the same window, 0 to {format_duration(window_s)} (the latest "
        f"end of any row), and the same {n_gpus} GPUs of the target cluster: a row whose last job ends "
        f"earlier is charged the whole cluster's idle power ({format_power(idle_total_w)}, GPUs and node base "
        "power) until the window ends, or, under Slurm's power saving, what its nodes would draw: idle power "
        "until SuspendTime after each emptied, then its shutdown (power cycles) and off power. Busy energy "
        "is the jobs' own (their power while they run); idle energy is that of every GPU not running a job "
        "and the base power (CPUs, memory, fans, NICs) of every powered-on node; off energy that of "
        "powered-down nodes. Saved energy per job against the record (positive: the policy uses less), "
        "mean over seeds; busy energy is split into what the power limits save (the policy against its "
        "own run without limits, `NAME+nolimit`), what sharing saves (zeus-share against zeus) and "
        "placement (the rest); the parts interact, so the split is first-order."
    )
    lines += [
        "",
        "| Policy | Saved per job | Busy | Idle | Limits | Sharing | Placement |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in saved if saved is not None else savings(rows, baseline):
        cells = [r["busy_j"], r["idle_j"], r["limits_j"], r["sharing_j"], r["placement_j"]]
        lines.append(f"| {r['label']} | {_saved_cell(r)} | " + " | ".join(_signed(c) for c in cells) + " |")
    if saved is not None and any("verdict" in r for r in saved):
        lines += [
            "",
            "A saving is the mean over the jobs replayed with a recorded energy, with its 95% interval: each "
            "job is paired with its own record, its busy energy saved is averaged over the seeds and the "
            "jobs are resampled (seeded bootstrap); idle energy belongs to the schedule and is added as is. "
            f"Where the interval holds zero, or fewer than {MIN_JOBS} jobs are paired, the row says "
            '"no difference" and its split is not a result.',
        ]
    base = [m for label, m in rows if label == baseline]
    if base and base[0].get("busy_energy_per_job_j") is not None:
        lines += [
            "",
            f"The record: {format_energy(base[0]['busy_energy_per_job_j'])} busy and "
            f"{format_energy(base[0].get('idle_energy_per_job_j'))} idle energy per job over the window.",
        ]
    if unexplained_jobs:
        longest = ", ".join(f"{u['job_id']} ({format_duration(u['wait_s'])})" for u in unexplained[:5])
        lines += [
            "",
            f"**{unexplained_jobs} recorded jobs waited with GPUs free**: during their whole wait the record "
            "left at least as many GPUs of their type free on the target cluster as they asked for, so "
            "what held them (CPU jobs, other partitions, reservations, holds or dependencies) is not in "
            "the trace and no replay reproduces it. Their waits stay in the record's JCT; the idle energy "
            "around them is counted for every row alike (same window). Longest: "
            f"{longest}; {format_duration(unexplained_s)} of waiting in all.",
        ]
    return "\n".join(lines) + "\n"
