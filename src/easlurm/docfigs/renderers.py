"""What docs/power-budget.md and docs/colocation.md quote from their campaigns; the registry of every doc."""

from __future__ import annotations

from easlurm.docfigs.baselines import FIGURES as BASELINES_FIGURES
from easlurm.docfigs.comm import FIGURES as COMM_FIGURES
from easlurm.docfigs.figures import (
    DocFigures,
    Runs,
    campaign_source,
    ci,
    num,
    p_text,
    pct_change,
    signed_pct,
    table,
)
from easlurm.docfigs.limits import FIGURES as LIMITS_FIGURES
from easlurm.docfigs.oracle import FIGURES as ORACLE_FIGURES
from easlurm.docfigs.oracle_gpus import FIGURES as ORACLE_GPU_FIGURES
from easlurm.docfigs.site_calibration import FIGURES as SITE_FIGURES
from easlurm.measure.pairs import predict_pair
from easlurm.model.oracle import Oracle
from easlurm.sim.scenarios import get_scenario
from easlurm.units import format_energy

BUDGET_EXP = "budget-4500W"


def _never_started(runs: Runs, experiment: str, label: str) -> tuple[int, int]:
    """(jobs never started by the end of the run, jobs submitted), over every seed."""
    jobs = runs.jobs(experiment, label)
    return sum(1 for j in jobs if j.get("start_s") is None), len(jobs)


def _late_starts(runs: Runs, experiment: str, label: str) -> float:
    """Share (%) of the urgent jobs that started only after their deadline had passed."""
    urgent = [
        j
        for j in runs.jobs(experiment, label)
        if j.get("urgent") and j.get("deadline_s") is not None and j.get("start_s") is not None
    ]
    late = sum(1 for j in urgent if j["start_s"] > j["deadline_s"])
    return 100.0 * late / len(urgent) if urgent else float("nan")


def power_budget(runs: Runs) -> dict[str, str]:
    """docs/power-budget.md: the setup, the table, the budget findings and where the capacity goes."""
    e = BUDGET_EXP
    labels = ("charon", "charon-thesis", "charon-pl")
    spec = next(r["spec"] for r in runs.records if r["experiment"] == e)
    budget, hours = float(spec["power_budget_w"]), float(spec["hours"])
    seeds = sorted(runs.per_seed(e, "charon", "throughput_jobs_per_h"))
    n = len(seeds)
    setup = (
        f"scenario `{spec['scenario']}` ({budget:.0f} W, thesis cluster and workload), {hours:g} h, seeds "
        f"{seeds[0]}-{seeds[-1]}, prediction noise sigma {spec['noise_sigma']:g}. Mean over seeds "
        "[bootstrap 95 % CI]; utilisation is busy GPU-hours over GPU-hours of each GPU type; never "
        f"started: jobs still waiting at the end of the run, over the {n} seeds."
    )
    rows = []
    for label in labels:
        s = lambda m, lab=label: runs.summary(e, lab, m)  # noqa: E731
        idle, submitted = _never_started(runs, e, label)
        rows.append(
            [
                label,
                ci(s("throughput_jobs_per_h")),
                ci(s("energy_j"), 1e-6),
                ci(s("energy_per_job_j"), 1e-6),
                ci(s("mean_power_w")),
                ci(s("max_power_w")),
                ci(s("time_over_budget_s")),
                num(runs.mean(e, label, "preemptions")),
                ci(s("util_a100_40gb"), 100),
                ci(s("util_h100_sxm"), 100),
                f"{idle} of {submitted}",
            ]
        )
    header = [
        "policy",
        "throughput (jobs/h)",
        "energy (MJ)",
        "energy/job (MJ)",
        "mean power (W)",
        "max power (W)",
        "over budget (s)",
        "preemptions",
        "A100 util (%)",
        "H100 util (%)",
        "never started",
    ]
    return {
        "charon-budget/setup": setup,
        "charon-budget/table": table(header, rows),
        "charon-budget/findings": _budget_findings(runs, budget, hours, n),
        "charon-budget/capacity": _budget_capacity(runs, budget, n),
    }


def _budget_findings(runs: Runs, budget: float, hours: float, n: int) -> str:
    e = BUDGET_EXP
    peak = runs.per_seed(e, "charon", "max_power_w")
    over = runs.per_seed(e, "charon", "time_over_budget_s")
    within = sum(1 for s in peak if peak[s] <= budget + 1e-6)
    text = f"Per seed, `charon` stays at or under {budget:.0f} W in {within} of {n} runs"
    if within < n:
        worst = max(peak, key=lambda s: (peak[s], s))
        text += (
            f"; the highest peak, seed {worst}, is {peak[worst]:.0f} W ({peak[worst] - budget:.0f} W over, "
            f"{over[worst]:.0f} s over the budget in all), and over the {n} seeds it is over the budget for "
            f"{sum(over.values()):.0f} s and sheds {runs.total(e, 'charon', 'preemptions'):.0f} jobs to get back"
        )
    done_c, done_t = (
        runs.total(e, "charon", "completed_jobs"),
        runs.total(e, "charon-thesis", "completed_jobs"),
    )
    epj = (runs.mean(e, "charon", "energy_per_job_j"), runs.mean(e, "charon-thesis", "energy_per_job_j"))
    text += (
        f". It completes {done_c:.0f} jobs over the {n} seeds against {done_t:.0f} for the thesis's Charon "
        f"({signed_pct(done_c, done_t)}), at {signed_pct(*epj)} energy per completed job. "
    )
    t_over = runs.per_seed(e, "charon-thesis", "time_over_budget_s")
    t_peak = runs.per_seed(e, "charon-thesis", "max_power_w")
    share = 100.0 * runs.mean(e, "charon-thesis", "time_over_budget_s") / (hours * 3600.0)
    text += (
        f"The thesis's Charon is over budget {share:.0f} % of the time on average "
        f"({min(t_over.values()) / 60:.0f}-{max(t_over.values()) / 60:.0f} min per {hours:g} h run), peaking "
        f"at {min(t_peak.values()):.0f}-{max(t_peak.values()):.0f} W. "
    )
    pl_peak = max(runs.per_seed(e, "charon-pl", "max_power_w").values())
    done_pl = runs.total(e, "charon-pl", "completed_jobs")
    held = "never exceeds the budget" if pl_peak <= budget + 1e-6 else f"peaks at {pl_peak:.0f} W"
    text += (
        f"Charon-PL, which budgets every start at its power limit, {held} and completes "
        f"{pct_change(done_pl, done_c):.0f} % more jobs than `charon` with "
        f"{-pct_change(runs.mean(e, 'charon-pl', 'energy_per_job_j'), epj[0]):.0f} % less energy per "
        "job: it also picks limits for their energy-delay product, not only to fit the budget."
    )
    return text


def _budget_capacity(runs: Runs, budget: float, n: int) -> str:
    e = BUDGET_EXP

    def util(label: str, metric: str) -> str:
        per = runs.per_seed(e, label, metric)
        zero = sum(1 for v in per.values() if v < 0.0005)
        tail = f", 0.0 in {zero} of {n} seeds" if zero else ""
        return f"{100 * runs.mean(e, label, metric):.1f} %{tail}"

    jct = lambda lab: num(runs.mean(e, lab, "mean_jct_s"), 1 / 3600)  # noqa: E731
    miss = lambda lab: f"{100 * runs.mean(e, lab, 'deadline_miss_rate'):.0f}"  # noqa: E731
    mean_w = {lab: runs.mean(e, lab, "mean_gpu_power_w") for lab in ("charon", "charon-thesis", "charon-pl")}
    idle = {lab: _never_started(runs, e, lab) for lab in ("charon", "charon-thesis")}
    return (
        f"A100 utilisation: `charon-thesis` {util('charon-thesis', 'util_a100_40gb')}, `charon` "
        f"{util('charon', 'util_a100_40gb')}, `charon-pl` {util('charon-pl', 'util_a100_40gb')} "
        f"(H100: {util('charon-thesis', 'util_h100_sxm')}, {util('charon', 'util_h100_sxm')}, "
        f"{util('charon-pl', 'util_h100_sxm')}). Mean GPU power: {mean_w['charon-thesis']:.0f} W, "
        f"{mean_w['charon']:.0f} W ({100 * mean_w['charon'] / budget:.0f} % of the budget) and "
        f"{mean_w['charon-pl']:.0f} W. Jobs never started: {idle['charon-thesis'][0]} of "
        f"{idle['charon-thesis'][1]} under the thesis's rule, {idle['charon'][0]} under `charon`. "
        "The jobs it starts this way run on fewer or slower GPUs, and jobs the thesis's rule never "
        f"started now start late and finish: the mean JCT of the completed jobs is {jct('charon')} h "
        f"against {jct('charon-thesis')} h, and {miss('charon')} % of the urgent jobs miss their deadline "
        f"against {miss('charon-thesis')} % ({jct('charon-pl')} h and {miss('charon-pl')} % for `charon-pl`); "
        f"{_late_starts(runs, e, 'charon'):.0f} % of the urgent jobs `charon` starts start after their "
        f"deadline has passed ({_late_starts(runs, e, 'charon-thesis'):.0f} % under the thesis's rule)."
    )


COLOC_CELLS = (
    ("small (time-slice)", "small-jobs", ("zeus", "zeus-share")),
    ("small (mps)", "small-jobs-mps", ("zeus-share",)),
    ("large (time-slice)", "large-jobs", ("zeus", "zeus-share", "share-always")),
    ("large (mps)", "large-jobs-mps", ("zeus-share", "share-always")),
)


def colocation(runs: Runs) -> dict[str, str]:
    """docs/colocation.md: the table and the findings on small and large jobs."""
    rows = []
    for name, e, labels in COLOC_CELLS:
        for label in labels:
            if label != "zeus" and runs.identical(e, "zeus", label):
                rows.append([name, label, "identical to zeus in every seed", "", "", "", "", "0"])
                continue
            s = lambda m, lab=label, exp=e: runs.summary(exp, lab, m)  # noqa: E731
            shared, submitted = runs.mean(e, label, "colocated_jobs"), runs.mean(e, label, "submitted_jobs")
            rows.append(
                [
                    name,
                    label,
                    ci(s("throughput_jobs_per_h")),
                    ci(s("energy_per_job_j"), 1e-6),
                    ci(s("mean_jct_s")),
                    ci(s("deadline_miss_rate"), 100),
                    num(runs.mean(e, label, "max_power_w")),
                    f"{shared:.0f} of {submitted:.0f}" if shared else "0",
                ]
            )
    header = [
        "scenario (sharing)",
        "policy",
        "throughput (jobs/h)",
        "energy/job (MJ)",
        "mean JCT (s)",
        "deadline miss (%)",
        "max power (W)",
        "jobs shared",
    ]
    return {
        "colocation/pairs": _coloc_pairs(),
        "colocation/table": table(header, rows),
        "colocation/findings": _coloc_findings(runs),
        "colocation/where": _coloc_where(runs),
    }


#: the example pairs of docs/colocation.md: (first, second, sharing), as `easlurm model corun` names them
COLOC_PAIRS = (
    ("bert-base:16", "distilbert:8", "time-slice"),
    ("resnet50:16", "vit-b16:16", "time-slice"),
    ("bert-base:16", "gpt2:16", "time-slice"),
    ("gpt2:16", "gpt2:16", "time-slice"),
    ("resnet50:256", "resnet50:256", "mps"),
    ("resnet50:16:fp32-strict", "albert-base:32", "time-slice"),
    ("resnet50:16:fp32-strict", "albert-base:32", "mps"),
    ("tinyllama-1.1b:32", "gpt2:16", "time-slice"),
)


def _coloc_pairs(gpu: str = "h100-sxm") -> str:
    """What `easlurm model corun FIRST SECOND --gpu h100-sxm` says of each example pair (shipped parameters):
    the energy per unit of work against running the two one after the other is the pair's power over the
    alone powers weighted by the speeds (the same work done in the same time alone)."""
    oracle = Oracle()
    rows = []
    for first, second, sharing in COLOC_PAIRS:
        (a, b), co = predict_pair(oracle, first, second, gpu, sharing)
        pair = f"{first} + {second}"
        alone = f"{a.power_w:.0f} W" if first == second else f"{a.power_w:.0f}, {b.power_w:.0f} W"
        if not co.feasible:
            need = f"{a.peak_mem_bytes / 2**30:.1f} + {b.peak_mem_bytes / 2**30:.1f} GiB"
            rows.append([pair, "any", "-", "-", f"infeasible: {need}", "-"])
            continue
        sequential = co.speed[0] * a.power_w + co.speed[1] * b.power_w
        rows.append(
            [
                pair,
                sharing,
                f"{co.speed[0]:.2f} / {co.speed[1]:.2f}",
                f"{co.throughput:.2f}",
                f"{co.power_w:.0f} W ({alone})",
                f"{co.power_w / sequential:.2f}",
            ]
        )
    header = [
        "pair",
        "sharing",
        "speeds",
        "STP",
        "GPU power (alone)",
        "energy per unit of work vs one after the other",
    ]
    return table(header, rows)


def _coloc_findings(runs: Runs) -> str:
    sm, lg = "small-jobs", "large-jobs"
    m = lambda e, lab, k: runs.mean(e, lab, k)  # noqa: E731
    tput = pct_change(m(sm, "zeus-share", "throughput_jobs_per_h"), m(sm, "zeus", "throughput_jobs_per_h"))
    epj = -pct_change(m(sm, "zeus-share", "energy_per_job_j"), m(sm, "zeus", "energy_per_job_j"))
    jct = -pct_change(m(sm, "zeus-share", "mean_jct_s"), m(sm, "zeus", "mean_jct_s"))
    p95 = (m(sm, "zeus", "p95_jct_s") / 3600, m(sm, "zeus-share", "p95_jct_s") / 3600)
    miss = (m(sm, "zeus", "deadline_miss_rate"), m(sm, "zeus-share", "deadline_miss_rate"))
    p = lambda e, a, b, k: p_text(runs.p_paired(e, a, b, k))  # noqa: E731
    same_large = runs.identical(lg, "zeus", "zeus-share") and runs.identical(
        "large-jobs-mps", "zeus", "zeus-share"
    )
    text = (
        f"On small jobs zeus-share completes {tput:.1f} % more jobs per hour "
        f"(p = {p(sm, 'zeus', 'zeus-share', 'throughput_jobs_per_h')}) with {epj:.1f} % less energy per "
        f"completed job (p = {p(sm, 'zeus', 'zeus-share', 'energy_per_job_j')}), cuts the mean JCT by "
        f"{jct:.0f} % and the p95 JCT from {num(p95[0])} h to {num(p95[1])} h, and misses "
        f"{'no' if miss[1] == 0 else f'{100 * miss[1]:.0f} % of the'} deadline"
        f"{'' if miss[1] == 0 else 's'} (Zeus: {100 * miss[0]:.0f} %, its queue grows all day). "
    )
    text += (
        "On large jobs it never co-locates, so it equals Zeus in every seed; "
        if same_large
        else "On large jobs it co-locates some pairs (it no longer equals Zeus in every seed); "
    )
    keys = ("throughput_jobs_per_h", "energy_per_job_j", "deadline_miss_rate")
    ps = [runs.p_paired(lg, "zeus", "share-always", k) for k in keys]
    energy = pct_change(m(lg, "share-always", keys[1]), m(lg, "zeus", keys[1]))
    text += (
        "co-locating them anyway (`share-always`) loses "
        f"{-pct_change(m(lg, 'share-always', keys[0]), m(lg, 'zeus', keys[0])):.0f} % of the throughput, "
        + (
            f"costs {energy:.0f} % more"
            if energy >= 0.5
            else f"uses {-energy:.0f} % less"
            if energy <= -0.5
            else "uses about as much"
        )
        + " energy per "
        f"job and makes {100 * m(lg, 'share-always', keys[2]):.0f} % of the urgent jobs late "
        f"(all p <= {p_text(max(x for x in ps if x is not None))}). "
    )
    if runs.identical(sm, "zeus-share", "share-always"):
        text += (
            "On small jobs the rule accepts every pair it is offered, so `share-always` and `zeus-share` "
            "coincide there."
        )
    else:
        text += "On small jobs the rule refuses some pairs that `share-always` co-locates."
    return text


def _coloc_where(runs: Runs) -> str:
    e = "small-jobs"
    m = lambda lab, k: runs.mean(e, lab, k)  # noqa: E731
    busy_j = {lab: m(lab, "busy_energy_j") / m(lab, "completed_jobs") for lab in ("zeus", "zeus-share")}

    spec = next(r["spec"] for r in runs.records if r["experiment"] == e)
    load = spec["load_jobs_per_h"] or get_scenario(spec["scenario"]).load_jobs_per_h
    return (
        f"Where the gains come from: at {load:g} jobs/h the eight GPUs alone are full (utilisation "
        f"{m('zeus', 'util_h100_sxm'):.2f}) and the queue grows. Zeus-share puts a waiting job on a busy "
        f"GPU: {m('zeus-share', 'colocated_jobs'):.0f} of {m('zeus-share', 'submitted_jobs'):.0f} jobs "
        "spend part of their run shared "
        f"({m('zeus-share', 'shared_job_h'):.0f} job-hours), so the queue drains: that is the throughput, "
        "JCT and deadline gain. The energy gain is the pair's energy per unit of work on the shared part "
        f"of the runs: busy energy per completed job falls from {format_energy(busy_j['zeus'])} to "
        f"{format_energy(busy_j['zeus-share'])} ({signed_pct(busy_j['zeus-share'], busy_j['zeus'])}); "
        f"zeus-share then idles more once its queue is empty ({format_energy(m('zeus-share', 'idle_energy_j'))} "
        f"against {format_energy(m('zeus', 'idle_energy_j'))} over {runs.records[0]['spec']['hours']:g} h), "
        "which leaves "
        f"{signed_pct(m('zeus-share', 'energy_per_job_j'), m('zeus', 'energy_per_job_j'))} in total "
        f"energy per job. The price is a higher peak: {m('zeus-share', 'max_power_w'):.0f} W against "
        f"{m('zeus', 'max_power_w'):.0f} W."
    )


#: name -> the doc and the campaign its marked blocks are rendered from.
DOCS: dict[str, DocFigures] = {
    "power-budget": DocFigures(
        "docs/power-budget.md",
        "campaigns/charon-budget.yaml",
        campaign_source("campaigns/charon-budget.yaml"),
        power_budget,
    ),
    "colocation": DocFigures(
        "docs/colocation.md",
        "campaigns/colocation.yaml",
        campaign_source("campaigns/colocation.yaml"),
        colocation,
    ),
    "evaluate": ORACLE_FIGURES,
    "oracle-gpus": ORACLE_GPU_FIGURES,
    "oracle-calibrate": SITE_FIGURES,
    "oracle-comm": COMM_FIGURES,
    "power-limits": LIMITS_FIGURES,
    "baselines": BASELINES_FIGURES,
}
