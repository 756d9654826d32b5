"""What docs/site-baselines.md quotes: the energy policies against what a site does today (`slurm`, the best
static cap, `slurm+power-saving`) in scenario B and on the real trace excerpts, and zeus-share against zeus
on coloc-small; rerun by `easlurm sim doc-figures baselines`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.docfigs.figures import DocFigures, Runs, campaign_source, ci, p_text, table
from easlurm.docfigs.limits import ALIBABA, CONVERTER, PHILLY, PHILLY_CONVERTER, convert_excerpt
from easlurm.priority.packing import DEFAULT_MAX_SLOWDOWN
from easlurm.sim.campaign_run import row_of
from easlurm.sim.replay import BASELINE_LABEL, ReplayRequest, replay
from easlurm.sim.site_baselines import (
    ENERGY,
    JCT,
    POWER_SAVING_LABEL,
    SLURM,
    Ratio,
    best_static_cap,
    cap_of,
    paired_ratio,
)
from easlurm.units import format_duration

PLAN = "campaigns/baselines.yaml"
DLRM = "tests/fixtures/traces/public/alibaba_gpu_v2025_dlrm_hn_first48h.csv"
DLRM_CONVERTER = "scripts/convert-alibaba-dlrm-trace"
EXP_B, EXP_SLACK, EXP_COLOC = "B-site", "B-slack", "coloc"
#: a slack whose energy per job is within this many points of slurm's of the deepest slack's has reached
#: the flat end of the trade-off curve
FLAT_POINTS = 1.0
#: the energy policies compared (the plan's and the replays' non-baseline rows)
ENERGY_POLICIES = ("zeus", "zeus+power-saving")
REPLAY_SEEDS = (0, 1, 2)
#: the issue's figures: scenario B (energy per job, mean JCT against slurm), each real trace (against
#: its record), points of slurm's energy per job below the best static cap at equal or better JCT
TARGET_B, TARGET_TRACE, TARGET_JCT, TARGET_CAP_POINTS = 0.70, 0.75, 1.05, 8.0
TO_MJ = 1e-6


@dataclass
class BaselinesData:
    campaign: Runs
    replays: list[tuple[str, Any, Runs]]  # (trace name, ReplayResult, its runs)


def baselines_source(root: Path, work_dir: Path, jobs: int) -> BaselinesData:
    """Run the plan; convert the Alibaba and Philly excerpts and replay them with the site baselines."""
    runs = campaign_source(PLAN)(root, work_dir / "campaign", jobs)
    work_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for name, script, source, target in (
        ("Alibaba GPU v2023 (CSV)", CONVERTER, ALIBABA, "alibaba.csv"),
        ("Philly (SWF)", PHILLY_CONVERTER, PHILLY, "philly.swf"),
        ("Alibaba GPU v2025 DLRM (CSV)", DLRM_CONVERTER, DLRM, "dlrm.csv"),
    ):
        trace = convert_excerpt(root, script, source, work_dir / target)
        res = replay(ReplayRequest(trace, None, ENERGY_POLICIES, seeds=REPLAY_SEEDS, baselines=True))
        records = res.records()
        out.append((name, res, Runs(records, [row_of(r) for r in records])))
    return BaselinesData(runs, out)


def _ratio(runs: Runs, exp: str, a: str, b: str, metric: str) -> Ratio:
    return paired_ratio(runs.per_seed(exp, a, metric), runs.per_seed(exp, b, metric))


def _labels(runs: Runs, exp: str) -> list[str]:
    return list(dict.fromkeys(str(r["label"]) for r in runs.rows if r["experiment"] == exp))


def _best_cap(runs: Runs, exp: str) -> tuple[str | None, list[tuple[int, str]]]:
    labels = _labels(runs, exp)
    caps = sorted((c, lab) for lab in labels if (c := cap_of(lab)) is not None)
    means = {lab: (runs.mean(exp, lab, ENERGY), runs.mean(exp, lab, JCT)) for _, lab in caps}
    return best_static_cap(caps, means, runs.mean(exp, SLURM, JCT)), caps


def _best_energy(runs: Runs, exp: str) -> str:
    """The energy policy with the least energy per completed job (the first on a tie)."""
    return min(ENERGY_POLICIES, key=lambda p: runs.mean(exp, p, ENERGY))


def _cap_sentence(runs: Runs, exp: str, best: str, cap: str | None, caps: list[tuple[int, str]]) -> str:
    """The best energy policy against the best static cap, in points of slurm's energy per job."""
    if cap is None:
        fastest = min(caps, key=lambda c: runs.mean(exp, c[1], JCT))[1]
        slurm_e = runs.mean(exp, SLURM, ENERGY)
        points = 100.0 * (runs.mean(exp, fastest, ENERGY) - runs.mean(exp, best, ENERGY)) / slurm_e
        return (
            f"No static cap of the sweep ({', '.join(f'{c} %' for c, _ in caps)}) is as fast as `slurm` "
            f"(the fastest, `{fastest}`, has {_ratio(runs, exp, fastest, SLURM, JCT).text()} of its mean JCT), "
            "so there is no best static cap and the figure against it cannot be judged. Against that "
            f"fastest cap ({runs.mean(exp, fastest, ENERGY) / slurm_e:.3f} of `slurm`'s energy per job), "
            f"`{best}` uses {points:.1f} points of `slurm`'s energy per job less, at "
            f"{_ratio(runs, exp, best, fastest, JCT).text()} of the cap's mean JCT."
        )
    slurm_e = runs.mean(exp, SLURM, ENERGY)
    points = 100.0 * (runs.mean(exp, cap, ENERGY) - runs.mean(exp, best, ENERGY)) / slurm_e
    t = _ratio(runs, exp, best, cap, JCT)
    met = points >= TARGET_CAP_POINTS and t.ratio is not None and t.ratio <= 1.0
    return (
        f"The best static cap is `{cap}` ({runs.mean(exp, cap, ENERGY) / slurm_e:.3f} of `slurm`'s energy "
        f"per job at {runs.mean(exp, cap, JCT) / runs.mean(exp, SLURM, JCT):.3f} of its mean JCT); `{best}` "
        f"uses {points:.1f} points of `slurm`'s energy per job less, at {t.text()} of the cap's mean JCT: "
        f"the figure (at least {TARGET_CAP_POINTS:.0f} points less at equal or better mean JCT) is "
        + ("met." if met else "not met.")
    )


def scenario_b(runs: Runs) -> dict[str, str]:
    labels = _labels(runs, EXP_B)
    rows = []
    for lab in labels:
        s = lambda m, lab=lab: runs.summary(EXP_B, lab, m)  # noqa: E731
        rows.append(
            [
                lab,
                ci(s(ENERGY), TO_MJ),
                "1" if lab == SLURM else _ratio(runs, EXP_B, lab, SLURM, ENERGY).text(),
                ci(s(JCT)),
                "1" if lab == SLURM else _ratio(runs, EXP_B, lab, SLURM, JCT).text(),
                ci(s("idle_energy_j"), TO_MJ),
                ci(s("off_energy_j"), TO_MJ),
                ci(s("power_cycles")),
            ]
        )
    header = [
        "Policy",
        "Energy/completed job (MJ)",
        "vs slurm",
        "Mean JCT (s)",
        "vs slurm",
        "Idle energy (MJ)",
        "Off energy (MJ)",
        "Power-downs",
    ]
    best = _best_energy(runs, EXP_B)
    e, t = _ratio(runs, EXP_B, best, SLURM, ENERGY), _ratio(runs, EXP_B, best, SLURM, JCT)
    p_e, p_t = runs.p_paired(EXP_B, best, SLURM, ENERGY), runs.p_paired(EXP_B, best, SLURM, JCT)
    met = (
        e.ratio is not None
        and t.ratio is not None
        and e.ratio <= TARGET_B
        and t.ratio <= TARGET_JCT
        and p_e is not None
        and p_e < 0.05
    )
    ps = _ratio(runs, EXP_B, POWER_SAVING_LABEL, SLURM, ENERGY)
    cap, caps = _best_cap(runs, EXP_B)
    findings = (
        f"The energy policy with the least energy per completed job, `{best}`, uses {e.text()} of `slurm`'s "
        f"(seed-paired Wilcoxon p = {p_text(p_e)}) at {t.text()} of its mean JCT (p = {p_text(p_t)}): the "
        f"figure (at most {TARGET_B:.2f} of the energy at most {TARGET_JCT:.2f} of the mean JCT, a "
        f"significant paired test) is {'met' if met else 'not met'}"
        + (
            f": the JCT budget is not what binds (it runs at {t.text()} of `slurm`'s mean JCT, against a budget "
            f"of {TARGET_JCT:.2f}): its busy-energy lever, the power limits, stops saving past a slowdown bound of "
            f"{_flat_slack(runs):g} (the JCT slack table below), and what is left is the idle and node base power "
            "of a cluster kept busy"
            if not met and t.ratio is not None and t.ratio < 1.0
            else ""
        )
        + ". Slurm's power saving alone gives "
        f"{ps.text()} of `slurm`'s energy per job: scenario B keeps its GPUs "
        f"{_util(runs, SLURM)} busy under `slurm`, so few nodes stay idle for SuspendTime. "
        + _cap_sentence(runs, EXP_B, best, cap, caps)
    )
    return {"site-baselines/scenario-b": table(header, rows), "site-baselines/scenario-b-findings": findings}


def _slacks(runs: Runs) -> list[tuple[float, str]]:
    """(max_slowdown, label) of the slack experiment's rows, in order."""
    return sorted((float(lab.rsplit("-", 1)[1]), lab) for lab in _labels(runs, EXP_SLACK))


def _slack_vs_slurm(runs: Runs, label: str, metric: str) -> Ratio:
    """A slack row against `slurm` of the site experiment: the same scenario and seeds, paired by seed."""
    return paired_ratio(runs.per_seed(EXP_SLACK, label, metric), runs.per_seed(EXP_B, SLURM, metric))


def _flat_slack(runs: Runs) -> float:
    """The smallest slowdown bound whose energy per job is within FLAT_POINTS of the deepest one's."""
    slacks = _slacks(runs)
    ratio = {s: _slack_vs_slurm(runs, lab, ENERGY).ratio for s, lab in slacks}
    deepest = ratio[slacks[-1][0]]
    assert deepest is not None
    return next(s for s, _ in slacks if (r := ratio[s]) is not None and 100.0 * (r - deepest) <= FLAT_POINTS)


def jct_slack(runs: Runs) -> dict[str, str]:
    """Zeus's trade-off of energy per job against mean JCT over its slowdown bound, against `slurm`."""
    rows = []
    for slack, lab in _slacks(runs):
        rows.append(
            [
                f"{slack:g}" + (" (default)" if slack == DEFAULT_MAX_SLOWDOWN else ""),
                ci(runs.summary(EXP_SLACK, lab, ENERGY), TO_MJ),
                _slack_vs_slurm(runs, lab, ENERGY).text(),
                ci(runs.summary(EXP_SLACK, lab, JCT)),
                _slack_vs_slurm(runs, lab, JCT).text(),
            ]
        )
    header = ["sched.max_slowdown", "Energy/completed job (MJ)", "vs slurm", "Mean JCT (s)", "vs slurm"]
    flat = _flat_slack(runs)
    first, last = _slacks(runs)[0], _slacks(runs)[-1]
    e0, e1 = (_slack_vs_slurm(runs, lab, ENERGY).ratio for _, lab in (first, last))
    t0, t1 = (_slack_vs_slurm(runs, lab, JCT).ratio for _, lab in (first, last))
    assert e0 is not None and e1 is not None and t0 is not None and t1 is not None
    default = next(lab for slack, lab in _slacks(runs) if slack == DEFAULT_MAX_SLOWDOWN)
    flat_lab = next(lab for slack, lab in _slacks(runs) if slack == flat)
    ed, ef = (_slack_vs_slurm(runs, lab, ENERGY).ratio for lab in (default, flat_lab))
    td, tf = (_slack_vs_slurm(runs, lab, JCT).ratio for lab in (default, flat_lab))
    assert ed is not None and ef is not None and td is not None and tf is not None
    text = (
        f"From a bound of {first[0]:g} to {last[0]:g}, Zeus's energy per completed job goes from {e0:.3f} to "
        f"{e1:.3f} of `slurm`'s and its mean JCT from {t0:.3f} to {t1:.3f} of `slurm`'s; from {flat:g} on, a "
        f"looser bound saves less than {FLAT_POINTS:g} point of `slurm`'s energy per job (the curve is flat). "
        f"The default, {DEFAULT_MAX_SLOWDOWN:g}, is the JCT budget of the figures ({1 + DEFAULT_MAX_SLOWDOWN:g} "
        "times the JCT a job would see uncapped): a job that starts at once runs at most that much longer, so "
        "rigid traces, where a job's JCT is mostly its run, stay within budget; a job that waited may spend "
        "the same share of its wait. Here, where jobs wait, "
        + (
            f"a site that accepts a bound of {flat:g} saves {100.0 * (ed - ef):.1f} more points of `slurm`'s "
            f"energy per job, at {tf:.3f} of `slurm`'s mean JCT instead of {td:.3f}."
            if flat > DEFAULT_MAX_SLOWDOWN
            else "the default is already on the flat end of the curve."
        )
    )
    return {"site-baselines/jct-slack": table(header, rows) + "\n\n" + text}


def _util(runs: Runs, label: str) -> str:
    utils = [
        runs.mean(EXP_B, label, m)
        for m in sorted({k for r in runs.rows for k in r if k.startswith("util_")})
        if runs.per_seed(EXP_B, label, m)
    ]
    return f"{100.0 * sum(utils) / len(utils):.0f} %" if utils else "mostly"


def real_traces(data: BaselinesData) -> dict[str, str]:
    rows, sentences = [], []
    for name, res, runs in data.replays:
        exp = "replay"
        best = _best_energy(runs, exp)
        cap, caps = _best_cap(runs, exp)
        has_record = res.unknown_start_jobs < res.mapping.mapped and runs.per_seed(
            exp, BASELINE_LABEL, ENERGY
        )
        against = [(BASELINE_LABEL, "record")] if has_record else []
        against += [(SLURM, "slurm")] + ([(cap, "cap")] if cap else []) + [(POWER_SAVING_LABEL, "ps")]
        cells: dict[str, str] = {}
        for base, key in against:
            if base == BASELINE_LABEL:  # one run: the ratio of the means, no interval
                e = runs.mean(exp, best, ENERGY) / runs.mean(exp, base, ENERGY)
                t = runs.mean(exp, best, JCT) / runs.mean(exp, base, JCT)
                cells[key] = f"{e:.3f} / {t:.3f}"
            else:
                cells[key] = (
                    f"{_ratio(runs, exp, best, base, ENERGY).text()} / {_ratio(runs, exp, best, base, JCT).text()}"
                )
        rows.append(
            [
                name,
                str(res.mapping.mapped),
                str(res.cluster_gpus),
                best,
                ci(runs.summary(exp, best, ENERGY), TO_MJ),
                cells.get("record", "no record"),
                cells["slurm"],
                f"{cap}: {cells['cap']}" if cap else "none qualifies",
                cells["ps"],
            ]
        )
        if has_record:
            e = runs.mean(exp, best, ENERGY) / runs.mean(exp, BASELINE_LABEL, ENERGY)
            t = runs.mean(exp, best, JCT) / runs.mean(exp, BASELINE_LABEL, JCT)
            verdict = "met" if e <= TARGET_TRACE and t <= TARGET_JCT else "not met"
            record = (
                f"`{best}` uses {e:.3f} of the record's energy per job at {t:.3f} of its mean JCT: the figure "
                f"(at most {TARGET_TRACE:.2f} at most {TARGET_JCT:.2f}) is {verdict}"
            )
        else:
            record = (
                f"the trace says no job's start, so there is no record to compare with (the figure against "
                f"the record cannot be judged); `{best}` uses "
                f"{_ratio(runs, exp, best, SLURM, ENERGY).text()} of `slurm`'s energy per job"
            )
        idle = runs.mean(exp, SLURM, "idle_energy_j") / runs.mean(exp, SLURM, "energy_j")
        sentences.append(
            f"{name}: {res.mapping.mapped} jobs on `{res.cluster_name}` ({res.cluster_gpus} GPUs), seeds "
            f"{REPLAY_SEEDS[0]}-{REPLAY_SEEDS[-1]}, every row over the same window of "
            f"{format_duration(res.window_s)}; idle energy is {idle:.0%} of `slurm`'s. {record[0].upper()}"
            f"{record[1:]}. {_cap_sentence(runs, exp, best, cap, caps)}"
        )
    header = [
        "Trace (format)",
        "Jobs",
        "GPUs",
        "Best energy policy",
        "Energy/job (MJ)",
        "vs the record (energy / JCT)",
        "vs slurm",
        "vs the best static cap",
        "vs slurm + power saving",
    ]
    return {
        "site-baselines/real-traces": table(header, rows),
        "site-baselines/real-traces-findings": "\n\n".join(sentences),
    }


def colocation(runs: Runs) -> dict[str, str]:
    thr, e = "throughput_jobs_per_h", ENERGY
    rt, re_ = (
        _ratio(runs, EXP_COLOC, "zeus-share", "zeus", thr),
        _ratio(runs, EXP_COLOC, "zeus-share", "zeus", e),
    )
    p_t, p_e = (
        runs.p_paired(EXP_COLOC, "zeus-share", "zeus", thr),
        runs.p_paired(EXP_COLOC, "zeus-share", "zeus", e),
    )
    met = rt.ratio is not None and re_.ratio is not None and rt.ratio > 1.0 and re_.ratio <= 1.0
    rows = [
        [
            lab,
            ci(runs.summary(EXP_COLOC, lab, thr)),
            ci(runs.summary(EXP_COLOC, lab, e), TO_MJ),
            ci(runs.summary(EXP_COLOC, lab, JCT)),
            ci(runs.summary(EXP_COLOC, lab, "colocated_jobs")),
        ]
        for lab in ("zeus", "zeus-share")
    ]
    seeds = len(runs.per_seed(EXP_COLOC, "zeus", e))
    text = (
        f"zeus-share against zeus on `coloc-small` ({seeds} seeds): {rt.text()} of its throughput "
        f"(seed-paired Wilcoxon p = {p_text(p_t)}) at {re_.text()} of its energy per completed job "
        f"(p = {p_text(p_e)}): the figure (more throughput and no more energy per job) is "
        + ("met." if met else "not met.")
        + (
            f" With {seeds} seeds a two-sided seed-paired Wilcoxon test cannot go below p = 0.0625."
            if seeds <= 5
            else ""
        )
    )
    header = ["Policy", "Throughput (jobs/h)", "Energy/completed job (MJ)", "Mean JCT (s)", "Jobs shared"]
    return {"site-baselines/colocation": table(header, rows) + "\n\n" + text}


def baselines_figures(data: BaselinesData) -> dict[str, str]:
    return {
        **scenario_b(data.campaign),
        **jct_slack(data.campaign),
        **real_traces(data),
        **colocation(data.campaign),
    }


FIGURES = DocFigures("docs/site-baselines.md", PLAN, baselines_source, baselines_figures)
