"""A site's own calibration carried to models it has not measured: leave-one-model-out per GPU type.

Run:
  python benchmarks/site_calibration_lomo.py [--sigma 0.3,0.1] [--maxiter 60 --popsize 8] [-j N] [CSV ...]
Each GPU type of the CSVs (default: our H100 SXM and H200 rows, Lambda's public throughputs) whose rows
hold two models or more is taken as a site: each model in turn is held out, `calibrate_site` fits that GPU
type's factors from the shipped parameters on the other models' rows, and the held-out model is predicted. For
each prior width given (log10 of the factor that costs one point of loss, for every factor but those that
keep the global width, `site.SITE_WIDE_PRIOR`; 0.3 is the global fit's, 0.1 the site calibration's), prints
per GPU type the base parameters' error on all its rows and the held-out error, then both pooled over every
held-out row: a site calibration that helps a model it has not measured brings the second below the first.
Time MAPE, and power where the rows carry it. Rows the shipped parameters find out of memory are left out
(counted in the first line), as `easlurm model evaluate` scores them apart. A few CPU minutes; asserts
nothing. docs/oracle-calibrate.md quotes the same sweep (`site_lomo.lomo_sweep`) from `easlurm sim doc-figures
oracle-calibrate`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from easlurm.model.fit.calibrate import FitReport
from easlurm.model.fit.site import pooled
from easlurm.model.fit.site_lomo import lomo_sweep, sites_of
from easlurm.model.hardware import load_catalogue
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
    ap.add_argument("-j", "--jobs", type=int, default=1, help="sites fitted at once (forked processes)")
    args = ap.parse_args()
    cat = load_catalogue()
    base = load_params()
    sites = sites_of(args.csv, base, cat)
    print(
        f"parameters {base.version}; {len(sites.rows)} GPU types with 2+ models; {sites.left_out} rows out of"
        f" memory in the model left out; load {os.getloadavg()[0]:.2f}"
    )
    for sigma in (float(s) for s in args.sigma.split(",")):
        start, wall = time.process_time(), time.perf_counter()
        print(f"prior width {sigma} (a factor of {10**sigma:.2f} costs one point)")
        out = lomo_sweep(
            sites.rows,
            base,
            cat,
            sigma_log10=sigma,
            maxiter=args.maxiter,
            popsize=args.popsize,
            jobs=args.jobs,
        )
        for s in out:
            per = "  ".join(f"{h.model} {_cells(h.fit.mape_time, h.fit.mape_power)}" for h in s.held)
            print(
                f"  {s.key:44s} before {_cells(s.before.mape_time, s.before.mape_power)}"
                f"  held out {_cells(*pooled([h.fit for h in s.held]))}  ({per})"
            )
        held: list[FitReport] = [h.fit for s in out for h in s.held]
        print(
            f"  pooled: before {_cells(*pooled([s.before for s in out]))}, held out {_cells(*pooled(held))}"
            f"  ({time.process_time() - start:.0f} CPU s in this process, {time.perf_counter() - wall:.0f} s wall)"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
