"""Wall time of a campaign (default: the full thesis plan) with N processes, then of its report.

    python benchmarks/bench_campaign.py                       # campaigns/thesis.yaml, --jobs 2
    python benchmarks/bench_campaign.py --seeds 2 --hours 1   # a quick look
Prints runs, runs/s, simulated events/s and the report's time; keeps the results with --out.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from easlurm.config import read_yaml_file
from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import run_campaign
from easlurm.sim.report import build_report

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", default=str(ROOT / "campaigns" / "thesis.yaml"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=None, help="override the plan's seed count")
    ap.add_argument("--hours", type=float, default=None, help="override the simulated hours")
    ap.add_argument("--out", default=None, help="keep results here (default: a temporary directory)")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()

    doc = read_yaml_file(Path(args.plan))
    for key, value in (("seeds", args.seeds), ("hours", args.hours)):
        if value is not None:
            doc[key] = value
            for exp in doc.get("experiments") or []:
                exp.pop(key, None)
    plan = parse_plan(doc, source=args.plan, base_dir=Path(args.plan).parent)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        n = len(plan.runs())
        print(f"plan {plan.name}: {n} runs, {len(plan.experiments)} experiments, --jobs {args.jobs}")
        t0 = time.perf_counter()
        outcome = run_campaign(plan, out, jobs=args.jobs)
        wall = time.perf_counter() - t0
        events = sum(r.get("events") or 0.0 for r in outcome.rows)
        run_walls = [r["wall_s"] for r in outcome.rows if r.get("wall_s") is not None]
        print(f"campaign: {outcome.executed} run, {outcome.skipped} skipped, {len(outcome.failed)} failed")
        print(f"campaign wall: {wall:.1f} s   runs/s: {outcome.executed / wall:.2f}")
        if run_walls:
            print(
                f"per run (simulator wall_s): mean {sum(run_walls) / len(run_walls):.3f} s, "
                f"max {max(run_walls):.3f} s"
            )
        if events:
            print(
                f"simulated events: {events:.0f}   events/s (campaign wall, all processes): {events / wall:.0f}"
            )
        if not args.no_report:
            t1 = time.perf_counter()
            files = build_report(out, report_cfg=plan.report)
            print(f"report: {time.perf_counter() - t1:.1f} s, {len(files.plots)} plots")
        if outcome.failed:
            first = next(iter(outcome.failed.items()))
            print(f"first failure: {first[0]}: {first[1]}")


if __name__ == "__main__":
    main()
