"""Held-out power-limit sweeps (Zeus NSDI'23 V100 PCIe and A40) predicted as a user would: per-GPU errors.

Run (the trace files are not in the repository; the Zeus commit and paths are in the converter's docstring):
  python scripts/convert-zeus-power-traces -o /tmp/heldout.csv \
      --trace summary_power_v100.csv=v100-pcie --trace summary_power_a40.csv=a40:tf32
  python benchmarks/heldout_zeus_limits.py /tmp/heldout.csv [--precision fp32-strict] [--params FILE]
Each row is predicted with the shipped parameters (or --params), the shipped catalogue and the example
catalogue's A40 (data/hardware/example-gpus.yaml, as `easlurm predict --hardware` reads it), the row's zoo
network, batch, image size, optimizer and power limit, and real data loading (the public Zeus sweeps'
input=real). Prints per GPU type and model: rows, MAPE of step time and power, the signed mean error, the
error at each power limit, and the oracle's minimum-energy limit against the measured best (its measured
energy excess, mean over jobs; a job is one GPU, model, batch and Zeus optimizer). The issue's bar: at most
20 % time and 12 % power per GPU and 3 % mean excess. Seconds of one core; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from easlurm.model.build import build_oracle
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements
from easlurm.model.fit.evaluate import MethodReport, RowResult, evaluate_method, make_splits, parse_cv
from easlurm.model.fit.limits import limit_choices, summarise_limits

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "hardware" / "example-gpus.yaml"


def _predictor(oracle: Any) -> Any:
    def predict(test: Sequence[Measurement]) -> tuple[np.ndarray, np.ndarray]:
        pred = oracle.predict_rows([m.workload() for m in test], placements_of(test))
        ok = np.ones(len(test), bool) if pred.feasible is None else pred.feasible.astype(bool)
        return np.where(ok, pred.step_time_s, np.nan), np.where(ok, pred.power_w, np.nan)

    print(f"params {oracle.params.version}, catalogue: shipped + {EXAMPLE.relative_to(ROOT)}")
    return lambda train, number: predict


def _loader_bound(oracle: Any, rows: Sequence[Measurement]) -> np.ndarray:
    """Rows whose predicted step is set by the real data loader's floor (more than 5 % above the same step
    with its input on the GPU already): their error is the host's loader, not the GPU's physics."""
    real = oracle.predict_rows([m.workload() for m in rows], placements_of(rows)).step_time_s
    synthetic = [dataclasses.replace(m.workload(), real_input=False) for m in rows]
    return np.asarray(real > 1.05 * oracle.predict_rows(synthetic, placements_of(rows)).step_time_s)


def _pct(v: float | None) -> str:
    return "   -  " if v is None else f"{v:6.1f}"


def _signed(rows: Sequence[RowResult], attr: str) -> float | None:
    vals = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
    return float(np.mean(vals)) if vals else None


def _print_scores(rep: MethodReport) -> None:
    print("GPU         model                 rows  time%  power%  signed time%  signed power%")
    groups: dict[tuple[str, str], list[RowResult]] = {}
    for r in rep.rows:
        groups.setdefault((r.gpu, r.model), []).append(r)
        groups.setdefault((r.gpu, "all"), []).append(r)
    for (gpu, model), rows in sorted(groups.items()):
        sub = MethodReport("", "", "", tuple(rows), 0.0)
        print(
            f"{gpu:11s} {model:21s} {len(rows):4d} {_pct(sub.mape_time)} {_pct(sub.mape_power)}  "
            f"{_pct(_signed(rows, 'time_err_pct'))}        {_pct(_signed(rows, 'power_err_pct'))}"
        )


def _print_by_limit(rep: MethodReport) -> None:
    print("\nsigned error by power limit (mean over batches): time% / power%")
    keys = sorted({(r.gpu, r.model) for r in rep.rows})
    for gpu, model in keys:
        mine = [r for r in rep.rows if (r.gpu, r.model) == (gpu, model)]
        cells = []
        for limit in sorted({r.power_limit_w for r in mine if r.power_limit_w is not None}):
            at = [r for r in mine if r.power_limit_w == limit]
            t, p = _signed(at, "time_err_pct"), _signed(at, "power_err_pct")
            cells.append(
                f"{limit:g}W {t:+.0f}/{p:+.0f}" if t is not None and p is not None else f"{limit:g}W -"
            )
        print(f"  {gpu} {model}: " + "  ".join(cells))


def _print_limits(rows: Sequence[Measurement], rep: MethodReport) -> None:
    """Limit choice per job; the V100's ShuffleNet was swept with two Zeus optimizers (both read as adam):
    each is its own job."""
    choices = []
    for opt in sorted({m.source.split(":")[0].split()[-1] for m in rows}):
        idx = [i for i, m in enumerate(rows) if m.source.split(":")[0].split()[-1] == opt]
        sub = MethodReport("", "", "", tuple(rep.rows[i] for i in idx), 0.0)
        choices += limit_choices(sub)
    print("\nminimum-energy limit: GPU, jobs, mean excess, max excess, best chosen, energy-ratio error")
    for s in summarise_limits(choices):
        ratio = "-" if s.mean_ratio_err_pct is None else f"{s.mean_ratio_err_pct:.1f} %"
        print(
            f"  {s.gpu:10s} {s.groups:3d}  {s.mean_excess_pct:5.2f} %  {s.max_excess_pct:5.1f} %  "
            f"{s.best_chosen}/{s.groups}  {ratio}"
        )
    worst = sorted(choices, key=lambda c: -c.excess_pct)[:5]
    for c in worst:
        print(
            f"    worst: {c.gpu} {c.model} b{c.batch}: chose {c.chosen_w:g} W, best {c.best_w:g} W, +{c.excess_pct:.1f} %"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measurements", type=Path)
    ap.add_argument("--params", default=None, help="oracle parameter YAML (default: the shipped set)")
    ap.add_argument(
        "--precision", default=None, help="predict every row at this precision instead of its own"
    )
    args = ap.parse_args()
    rows = read_measurements(args.measurements)
    if args.precision:
        rows = [dataclasses.replace(m, precision=args.precision) for m in rows]
    print(f"{args.measurements}: {len(rows)} rows; load average {os.getloadavg()[0]:.2f}")
    oracle = build_oracle(args.params, EXAMPLE, use_config=False)
    rep = evaluate_method(rows, make_splits(rows, parse_cv("none")), _predictor(oracle), "oracle", "")
    _print_scores(rep)
    bound = _loader_bound(oracle, rows)
    print(
        f"\nwithout the {int(bound.sum())} rows the oracle predicts loader-bound (the host's loader floor):"
    )
    _print_scores(MethodReport("", "", "", tuple(r for r, b in zip(rep.rows, bound) if not b), 0.0))
    _print_by_limit(rep)
    _print_limits(rows, rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
