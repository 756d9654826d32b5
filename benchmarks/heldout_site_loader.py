"""A site calibration on a few held-out rows of one GPU: what it does to that GPU's other rows, loader floor included.

Run (the held-out traces are not in the repository: convert them as benchmarks/heldout_zeus_limits.py says):
  python benchmarks/heldout_site_loader.py /tmp/heldout.csv [--gpu v100-pcie,a40] [--max-batch 64] [--params F]
For each GPU type, the "site's" rows are those at its highest power limit with a batch of at most
--max-batch (both networks, every Zeus optimizer: a handful of steps a site measures at its default limit);
`calibrate_site` fits them from the shipped parameters (shipped catalogue and the example catalogue's A40),
once as `easlurm model calibrate --site` does (the loader floor refitted where the rows are loader-bound:
site.LOADER_MIN_ROWS, LOADER_BOUND_FRAC) and once with the floor kept, and every other row of that GPU
(other batches, every lower limit) is predicted. Prints the rows' time and power MAPE with the shipped
parameters and each calibration, split into the rows whose step the calibrated oracle sets by the loader
floor (more than 5 % above its step with the input on the GPU) and the rest, and the fitted floor.
Measuring only: the held-out rows fit nothing shipped and are never written into the repository. Seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from easlurm.model.build import build_oracle
from easlurm.model.fit import site
from easlurm.model.fit.calibrate import score
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements
from easlurm.model.hardware import Catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams, load_params

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "hardware" / "example-gpus.yaml"


def _cells(params: OracleParams, rows: Sequence[Measurement], cat: Catalogue) -> str:
    if not rows:
        return "      -        "
    r = score(params, rows, cat)
    return f"{r.mape_time:5.1f} / {r.mape_power or 0.0:4.1f} %"


def _floor_set(params: OracleParams, rows: Sequence[Measurement], cat: Catalogue) -> list[bool]:
    """Rows whose predicted step is the loader's floor: over 1.05 times the step with the input on the GPU."""
    oracle, pl = Oracle(params, cat, cache_size=0), placements_of(rows)
    real = oracle.predict_rows([m.workload() for m in rows], pl).step_time_s
    on_gpu = [dataclasses.replace(m.workload(), real_input=False) for m in rows]
    return [bool(b) for b in real > 1.05 * oracle.predict_rows(on_gpu, pl).step_time_s]


def _one_gpu(gpu: str, rows: list[Measurement], base: OracleParams, cat: Catalogue, max_batch: int) -> None:
    top = max(m.power_limit_w or 0.0 for m in rows)
    train = [m for m in rows if (m.power_limit_w or 0.0) == top and m.batch <= max_batch]
    test = [m for m in rows if m not in train]
    with_floor = site.calibrate_site(train, base, cat)
    bound = _floor_set(with_floor.result.params, test, cat)
    groups = {
        "all other rows": test,
        "at the loader floor": [m for m, b in zip(test, bound) if b],
        "the rest": [m for m, b in zip(test, bound) if not b],
    }
    keep = site.LOADER_MIN_ROWS
    site.LOADER_MIN_ROWS = 10**9  # the floor kept: the same fit without the loader factor
    try:
        without = site.calibrate_site(train, base, cat)
    finally:
        site.LOADER_MIN_ROWS = keep
    key = cat.resolve(gpu)
    print(
        f"{gpu}: {len(train)} site rows ({top:g} W, batch <= {max_batch}; "
        f"{with_floor.loader_rows.get(key, 0)} loader-bound), {len(test)} other rows; loader floor "
        f"{1e3 * with_floor.loader_floor_s(key):.1f} ms a step fitted, {1e3 * base['t_input_step_s']:.1f} ms shipped"
    )
    print(
        f"  {'rows':30s} {'n':>4s}  {'shipped (time / power)':24s}{'site, floor refitted':24s}site, floor kept"
    )
    for label, sub in groups.items():
        cells = [_cells(p, sub, cat) for p in (base, with_floor.result.params, without.result.params)]
        print(f"  {label:30s} {len(sub):4d}  {cells[0]:24s}{cells[1]:24s}{cells[2]}")
    print(
        f"  site rows in-sample: {_cells(with_floor.result.params, train, cat)} (floor kept {_cells(without.result.params, train, cat)})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measurements", type=Path)
    ap.add_argument("--gpu", default="v100-pcie,a40")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--params", default=None, help="starting parameter YAML (default: the shipped set)")
    args = ap.parse_args()
    rows = read_measurements(args.measurements)
    base = load_params(args.params)
    cat = build_oracle(base, EXAMPLE, use_config=False).catalogue
    print(
        f"{args.measurements}: {len(rows)} rows; params {base.version}; load average {os.getloadavg()[0]:.2f}"
    )
    for gpu in args.gpu.split(","):
        mine = [m for m in rows if cat.resolve(m.gpu) == cat.resolve(gpu)]
        _one_gpu(gpu, mine, base, cat, args.max_batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
