"""Evaluation benchmark: wall time of leave-one-model-out (one calibration per model) against one in-sample fit.

Run: python benchmarks/bench_evaluate.py [MEASUREMENTS.csv]  (default: ../shared/data/h100/training_steps.csv
beside the repository, else data/oracle/*.csv; about 30 s on one core; prints figures, asserts nothing).
"""

from __future__ import annotations

import glob
import os
import sys
import time

from easlurm.model.fit.baseline import baseline_fitter, sklearn_available
from easlurm.model.fit.dataset import read_measurements
from easlurm.model.fit.evaluate import (
    calibrating_oracle,
    evaluate_method,
    fixed_oracle,
    make_splits,
    parse_cv,
)
from easlurm.model.params import load_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data", "h100", "training_steps.csv")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}%"


def bench(path: str) -> None:
    rows = read_measurements(path)
    params = load_params()
    print(f"{os.path.relpath(path, ROOT)}: {len(rows)} rows, {len({m.model for m in rows})} models")
    none = make_splits(rows, parse_cv("none"))
    rep = evaluate_method(rows, none, fixed_oracle(params), "oracle", "")
    print(f"  shipped params {params.version}: time {_pct(rep.mape_time)} power {_pct(rep.mape_power)}")
    fit = calibrating_oracle(params, maxiter=200, popsize=15, seed=0)
    t0 = time.perf_counter()
    rep = evaluate_method(rows, none, fit, "oracle", "")
    one = time.perf_counter() - t0
    print(f"  in-sample calibrate: {one:.1f} s, time {_pct(rep.mape_time)} power {_pct(rep.mape_power)}")
    schemes = ["leave-one-model-out"] if len({m.model for m in rows}) > 1 else []
    schemes += ["kfold:5"] if len(rows) >= 5 else []
    for scheme in schemes:
        splits = make_splits(rows, parse_cv(scheme))
        t0 = time.perf_counter()
        rep = evaluate_method(rows, splits, fit, "oracle", "", scheme)
        wall = time.perf_counter() - t0
        print(
            f"  {scheme}: {len(splits)} calibrations in {wall:.1f} s ({wall / len(splits):.1f} s each, "
            f"{wall / max(one, 1e-9):.1f}x one in-sample fit): time {_pct(rep.mape_time)} power {_pct(rep.mape_power)}"
        )
        for kind in ["ridge"] + (["rf"] if sklearn_available() else []):
            t0 = time.perf_counter()
            b = evaluate_method(rows, splits, baseline_fitter(kind), kind, "", scheme)
            print(
                f"    baseline {kind}: {time.perf_counter() - t0:.2f} s, "
                f"time {_pct(b.mape_time)} power {_pct(b.mape_power)}"
            )


if __name__ == "__main__":
    paths = sys.argv[1:] or ([SHARED] if os.path.exists(SHARED) else [])
    paths = paths or sorted(glob.glob(os.path.join(ROOT, "data", "oracle", "*.csv")))
    for p in paths:
        bench(p)
