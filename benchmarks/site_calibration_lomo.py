"""A site's own calibration carried to models it has not measured: leave-one-model-out per GPU type.

Run:
  python benchmarks/site_calibration_lomo.py [--sigma 0.3,0.1] [--maxiter 60 --popsize 8] [CSV ...]
Each GPU type of the CSVs (default: our H100 SXM and H200 rows, Lambda's public throughputs) whose rows
hold two models or more is taken as a site: each model in turn is held out, `calibrate_site` fits that GPU
type's factors from the shipped parameters on the other models' rows, and the held-out model is predicted. For
each prior width given (log10 of the factor that costs one point of loss, for every factor but those that
keep the global width, `site.SITE_WIDE_PRIOR`; 0.3 is the global fit's, 0.1 the site calibration's), prints
per GPU type the base parameters' error on all its rows and the held-out error, then both pooled over every
held-out row: a site calibration that helps a model it has not measured brings the second below the first.
Time MAPE, and power where the rows carry it. Rows the shipped parameters find out of memory are left out
(counted in the first line), as `easlurm model evaluate` scores them apart. A few CPU minutes; asserts
nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

from easlurm.model.fit import site
from easlurm.model.fit.calibrate import FitReport, score
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements
from easlurm.model.hardware import load_catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import load_params

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = (
    ROOT / "data" / "oracle" / "h100_sxm_training_steps.csv",
    ROOT / "data" / "oracle" / "h200_training_steps.csv",
    ROOT / "data" / "oracle" / "public" / "lambda_pytorch.csv",
)


def _cells(t: float, p: float | None) -> str:
    return f"{t:5.1f} %" + ("" if p is None else f" / {p:4.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="*", default=[str(p) for p in DEFAULT_DATA])
    ap.add_argument("--sigma", default="0.3,0.1", help="prior widths (log10) to compare, comma-separated")
    ap.add_argument("--maxiter", type=int, default=60)
    ap.add_argument("--popsize", type=int, default=8)
    args = ap.parse_args()
    cat = load_catalogue()
    base = load_params()
    by_gpu: dict[str, list[Measurement]] = defaultdict(list)
    oracle, left_out = Oracle(base, cat), 0
    for path in args.csv:
        rows = read_measurements(path)
        fits = oracle.predict_rows([m.workload() for m in rows], placements_of(rows)).feasible
        for m, ok in zip(rows, fits if fits is not None else [True] * len(rows)):
            if ok:
                by_gpu[f"{Path(path).stem}:{cat.resolve(m.gpu)}"].append(m)
            left_out += not ok
    sites = {k: rows for k, rows in sorted(by_gpu.items()) if len({m.model for m in rows}) > 1}
    print(
        f"parameters {base.version}; {len(sites)} GPU types with 2+ models; {left_out} rows out of memory in"
        f" the model left out; load {os.getloadavg()[0]:.2f}"
    )
    for sigma in (float(s) for s in args.sigma.split(",")):
        site.SITE_PRIOR_SIGMA_LOG10 = sigma
        start = time.process_time()
        befores: list[FitReport] = []
        held: list[FitReport] = []
        print(f"prior width {sigma} (a factor of {10**sigma:.2f} costs one point)")
        for key, rows in sites.items():
            before = score(base, rows, cat)
            out = site.site_leave_one_model_out(rows, base, cat, maxiter=args.maxiter, popsize=args.popsize)
            befores.append(before)
            held += [h.fit for h in out]
            per = "  ".join(f"{h.model} {_cells(h.fit.mape_time, h.fit.mape_power)}" for h in out)
            print(
                f"  {key:44s} before {_cells(before.mape_time, before.mape_power)}"
                f"  held out {_cells(*site.pooled([h.fit for h in out]))}  ({per})",
                flush=True,
            )
        print(
            f"  pooled: before {_cells(*site.pooled(befores))}, held out {_cells(*site.pooled(held))}"
            f"  ({time.process_time() - start:.0f} CPU s)"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
