"""Every report compares each policy with what a site does today: slurm, the best static cap, slurm with
power saving; a plan asks for those runs with `baselines:`, a replay with `--baselines`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from easlurm.errors import ConfigError
from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import load_records, row_of, run_campaign
from easlurm.sim.report import build_report
from easlurm.sim.site_baselines import POWER_SAVING_LABEL, Ratio, compare, paired_ratio
from easlurm.sim.spec import SimSpec

#: (energy per job J, mean JCT s) of each label in the fake runs: static-cap-50 is cheapest but slower
#: than slurm's JCT budget, static-cap-60 the cheapest cap within it
FAKE = {
    "slurm": (100.0, 1000.0),
    "static-cap-50": (80.0, 1200.0),
    "static-cap-60": (85.0, 1010.0),
    "static-cap-70": (90.0, 990.0),
    "static-cap-80": (95.0, 995.0),
    "static-cap-90": (99.0, 1000.0),
    POWER_SAVING_LABEL: (70.0, 1000.0),
    "zeus": (60.0, 1000.0),
}


def fake_runner(spec: SimSpec) -> dict[str, Any]:
    """Energy and JCT from FAKE (the power-saving run is slurm with power saving), a seed's small noise."""
    label = POWER_SAVING_LABEL if spec.power_saving else spec.policy
    e, t = FAKE[label]
    jitter = 1.0 + 0.001 * (spec.seed - 2)
    jobs = 10.0
    m = {
        "energy_j": e * jobs * jitter,
        "busy_energy_j": 0.5 * e * jobs * jitter,
        "idle_energy_j": 0.5 * e * jobs * jitter,
        "energy_per_job_j": e * jitter,
        "mean_jct_s": t * jitter,
        "completed_jobs": jobs,
        "throughput_jobs_per_h": 10.0,
    }
    return {"metrics": m, "power_times_s": [0.0, 1.0], "power_w": [1.0, 1.0], "jobs": []}


def test_baselines_true_adds_slurm_the_cap_sweep_and_slurm_with_power_saving() -> None:
    plan = parse_plan({"scenarios": ["B"], "policies": ["zeus", "slurm"], "seeds": 2, "baselines": True})
    (exp,) = plan.experiments
    labels = [p.label for p in exp.policies]
    assert labels == ["zeus", "slurm", *(f"static-cap-{c}" for c in (50, 60, 70, 80, 90)), POWER_SAVING_LABEL]
    runs = {r.label: r.spec for r in plan.runs() if r.spec.seed == 0}
    assert runs[POWER_SAVING_LABEL].policy == "slurm"
    assert dict(runs[POWER_SAVING_LABEL].power_saving) == {"suspend_time_s": 600.0}
    assert runs["slurm"].power_saving == () and runs["static-cap-50"].policy == "static-cap-50"


def test_baselines_mapping_and_a_policy_s_own_power_saving() -> None:
    plan = parse_plan(
        {
            "scenarios": ["B"],
            "power_saving": {"boot_s": 60},
            "policies": [{"policy": "zeus", "label": "zeus+ps", "power_saving": {"suspend_time_s": 300}}],
            "baselines": {"static_caps": [60, 80], "power_saving": {"suspend_time_s": "5min"}},
        }
    )
    specs = {r.label: r.spec for r in plan.runs()}
    assert set(specs) == {"zeus+ps", "slurm", "static-cap-60", "static-cap-80", POWER_SAVING_LABEL}
    assert dict(specs["zeus+ps"].power_saving) == {"boot_s": 60, "suspend_time_s": 300}
    assert dict(specs[POWER_SAVING_LABEL].power_saving) == {"boot_s": 60, "suspend_time_s": "5min"}
    for bad, match in (
        ({"static_caps": [0]}, "static_caps"),
        ({"caps": [50]}, "unknown field"),
        ("yes", "must be true"),
        ({"power_saving": {"suspend_time_s": 0}}, "baselines.power_saving.suspend_time_s"),
    ):
        with pytest.raises(ConfigError, match=match):
            parse_plan({"scenarios": ["B"], "policies": ["zeus"], "baselines": bad})


def test_paired_ratio_says_no_difference_where_its_interval_holds_one() -> None:
    same = paired_ratio({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.01, 1: 1.98, 2: 3.0})
    assert same.verdict == "no difference" and same.text().startswith("no difference (")
    lower = paired_ratio(
        {s: (0.78 + 0.01 * s) * (s + 1) for s in range(5)}, {s: float(s + 1) for s in range(5)}
    )
    assert lower.verdict == "lower" and lower.text().startswith(f"{lower.ratio:.3f} [")
    agree = paired_ratio({s: 0.8 * (s + 1) for s in range(5)}, {s: float(s + 1) for s in range(5)})
    assert agree.verdict == "lower" and agree.text() == "0.800 (every seed)"
    one = paired_ratio({0: 0.5}, {0: 1.0})
    assert one == Ratio(0.5, seeds=1) and one.text() == "0.500" and one.verdict == "no interval"


def _rows(labels: list[str], seeds: int = 3) -> list[dict[str, Any]]:
    out = []
    for lab in labels:
        for s in range(seeds):
            spec = SimSpec(policy=lab, seed=s, power_saving=(("suspend_time_s", 600),) if "+" in lab else ())
            m = fake_runner(spec)["metrics"]
            out.append({"label": lab, "seed": s, **m})
    return out


def test_the_best_static_cap_is_the_cheapest_within_the_jct_budget_or_none() -> None:
    """static-cap-60 is 1 % slower than slurm, within the 5 % budget, and cheaper than static-cap-70."""
    cmp = compare(_rows(list(FAKE)))
    assert cmp.best_cap == "static-cap-60" and cmp.slurm == "slurm" and cmp.power_saving == POWER_SAVING_LABEL
    e, t = cmp.ratios["zeus"]["static-cap-60"]
    assert e.ratio == pytest.approx(60 / 85) and e.verdict == "lower" and t.verdict == "lower"
    slow = compare(_rows(["slurm", "static-cap-50"]))
    assert slow.best_cap is None and [a for a, _ in slow.against] == ["slurm"]


def test_merged_rows_still_find_their_baselines() -> None:
    rows = _rows(["zeus", "slurm"])
    for r in rows:
        r["label"] = "pollux = slurm" if r["label"] == "slurm" else r["label"]
    assert compare(rows).slurm == "pollux = slurm"


def test_campaign_report_shows_each_policy_against_the_site_baselines(tmp_path: Path) -> None:
    plan = parse_plan({"name": "b", "scenarios": ["B"], "policies": ["zeus"], "seeds": 3, "baselines": True})
    run_campaign(plan, tmp_path, runner=fake_runner, jobs=1)
    md = build_report(tmp_path, html_too=False).markdown.read_text()
    assert "against what a site does today" in md
    assert "The best static cap is `static-cap-60`" in md
    head = next(line for line in md.splitlines() if line.startswith("| Policy | Energy/job vs slurm"))
    assert "best static cap (static-cap-60)" in head and "slurm + power saving" in head
    zeus = next(line for line in md.splitlines() if line.startswith("| zeus | 0.600 (every seed)"))
    assert "| 0.706 (every seed) |" in zeus and "| 0.857 (every seed) |" in zeus
    assert "| Policy | Energy/job | Busy | Idle | Off | Power cycles |" in md
    pytest.importorskip("matplotlib")
    assert (tmp_path / "plots" / "b_B_tradeoff.png").is_file() and "b_B_tradeoff.png" in md


def test_a_report_without_slurm_says_how_to_get_the_comparison(tmp_path: Path) -> None:
    plan = parse_plan({"name": "b", "scenarios": ["B"], "policies": ["zeus"], "seeds": 1})
    run_campaign(plan, tmp_path, runner=fake_runner, jobs=1)
    md = build_report(tmp_path, html_too=False).markdown.read_text()
    assert "No `slurm` run in this cell: add `baselines: true`" in md
    assert len(load_records(tmp_path)) == 1 and row_of(load_records(tmp_path)[0])["label"] == "zeus"


def test_replay_baselines_add_the_site_runs_and_power_saving_only_to_its_row(tmp_path: Path) -> None:
    """`--baselines`: slurm, the cap sweep and slurm+power-saving run beside the policies; only the last
    (and a policy named NAME+power-saving) powers nodes down, and on a trace with long idle spells it uses less energy per job than slurm."""
    from easlurm.sim.cluster import ClusterSpec
    from easlurm.sim.replay import ReplayRequest, replay, write_replay_report

    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit,start,duration,gpus,gpu_type,model\n"
        "a,0,0,600,2,a100,resnet50\n"
        "b,20000,20000,600,2,a100,resnet50\n"
    )
    cluster = ClusterSpec.from_dict({"name": "two", "nodes": [{"gpu_type": "a100", "gpus": 8, "count": 2}]})
    res = replay(
        ReplayRequest(trace, cluster, ["zeus", "zeus+power-saving"], noise_sigma=0.0, baselines=True)
    )
    labels = [name for name, _, _ in res.runs]
    assert res.run("zeus+power-saving")["metrics"]["power_cycles"] >= 1
    assert labels == [
        "zeus",
        "zeus+power-saving",
        "slurm",
        *(f"static-cap-{c}" for c in (50, 60, 70, 80, 90)),
        POWER_SAVING_LABEL,
    ]
    ps, slurm = res.run(POWER_SAVING_LABEL)["metrics"], res.run("slurm")["metrics"]
    assert ps["power_cycles"] >= 1 and not slurm.get("power_cycles")
    assert ps["energy_per_job_j"] < slurm["energy_per_job_j"]
    md = write_replay_report(res, tmp_path / "out", html_too=False).read_text()
    assert "against what a site does today" in md and "| zeus |" in md
