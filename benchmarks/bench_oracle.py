"""Oracle benchmark: placement predictions per second, calibration wall time, MAPE on the repo's measured data.

Run: python benchmarks/bench_oracle.py  (about 20 s on one core; prints figures, asserts nothing).
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import time

import numpy as np

from easlurm.model.fit.calibrate import calibrate, cross_validate, default_free, score
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import OracleParams, load_params
from easlurm.model.zoo import MODEL_NAMES, default_size, get_workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _jobs(n: int, seed: int = 0) -> list:
    """n jobs drawn from the zoo with varied precision and sequence/image size."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        name = MODEL_NAMES[rng.integers(len(MODEL_NAMES))]
        kind, size = default_size(name)
        size = int(size * rng.choice([0.5, 1.0, 1.0, 2.0])) if kind == "seq_len" else size
        out.append(get_workload(name, precision=str(rng.choice(["bf16", "tf32", "fp32"])), **{kind: size}))
    return out


def _distinct_jobs(n: int, seed: int = 0) -> list:
    """n jobs that are all different workloads (sequence lengths / image sizes drawn per job)."""
    rng = np.random.default_rng(seed)
    out: dict = {}
    while len(out) < n:
        name = MODEL_NAMES[rng.integers(len(MODEL_NAMES))]
        kind, size = default_size(name)
        size = int(rng.integers(16, 4 * size)) if kind == "seq_len" else int(16 * rng.integers(2, 33))
        w = get_workload(name, precision=str(rng.choice(["bf16", "tf32", "fp32"])), **{kind: size})
        out[w] = None
    return list(out)


def bench_predict() -> None:
    pl_ = Placements.grid([1, 2, 4, 8], [64, 256, 1024, 4096], ["a100-40gb", "h100-sxm"], [math.nan, 250.0])
    t0 = time.perf_counter()
    distinct = _distinct_jobs(10_000)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    Oracle().predict_many(distinct, pl_)
    dt = time.perf_counter() - t0
    n = len(distinct) * len(pl_)
    print(f"predict_many, 10000 DISTINCT workloads x {len(pl_)}: {dt:.3f} s -> {n / dt:,.0f} predictions/s")
    print(f"  (building those workloads from the zoo took {built:.1f} s, not counted)")
    jobs = _jobs(10_000)
    pl = Placements.grid([1, 2, 4, 8], [64, 256, 1024, 4096], ["a100-40gb", "h100-sxm"], [math.nan, 250.0])
    n = len(jobs) * len(pl)
    oracle = Oracle()
    t0 = time.perf_counter()
    pred = oracle.predict_many(jobs, pl)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    oracle.predict_many(jobs, pl)
    warm = time.perf_counter() - t0
    print(f"predict_many: {len(jobs)} queue jobs ({len(set(jobs))} distinct workloads) x {len(pl)} = {n}")
    print(
        f"  first call {cold:.3f} s -> {n / cold:,.0f} predictions/s; repeat {warm:.3f} s -> {n / warm:,.0f}/s"
    )
    print(f"  feasible placements: {pred.feasible.mean() * 100:.1f}%")
    uncached = Oracle(cache_size=0)
    t0 = time.perf_counter()
    for w in jobs:
        uncached.predict(w, pl)
    loop = time.perf_counter() - t0
    print(
        f"predict() per job, no cache: {loop:.2f} s -> {n / loop:,.0f} predictions/s ({loop / len(jobs) * 1e6:.0f} us/call)"
    )
    cached = Oracle()
    t0 = time.perf_counter()
    for w in jobs:
        cached.predict(w, pl)
    loop = time.perf_counter() - t0
    print(f"predict() per job, cached: {loop:.2f} s -> {n / loop:,.0f} predictions/s (hits {cached.hits})")


def bench_spread() -> None:
    """Placements with node spread: 1-32 GPUs packed or spread over 1-32 nodes (as a scheduler weighing where
    to put a job asks), on one core."""
    grid = Placements.grid(
        [1, 2, 4, 8, 16, 32],
        [64, 256, 1024],
        ["a100-40gb", "h100-sxm"],
        [math.nan, 250.0],
        [1, 2, 4, 8, 16, 32],
    )
    pl = grid.take(np.flatnonzero(-(-grid.n_gpus // grid.n_nodes) <= 8))
    jobs = _jobs(10_000, seed=1)
    n = len(jobs) * len(pl)
    oracle = Oracle()
    oracle.predict_many(jobs[:10], pl)  # workload features built once, as in a scheduler's cache
    t0 = time.perf_counter()
    pred = oracle.predict_many(jobs, pl)
    dt = time.perf_counter() - t0
    spread = int((pl.n_nodes > -(-pl.n_gpus // 8)).sum())
    print(
        f"predict_many with node spread: {len(jobs)} jobs x {len(pl)} placements ({spread} spread wider than "
        f"packed) = {n}: {dt:.3f} s -> {n / dt:,.0f} predictions/s"
    )
    print(f"  feasible placements: {pred.feasible.mean() * 100:.1f}%")


def bench_calibration() -> None:
    truth = OracleParams(
        {"beta_gemm": 0.55, "c_mem": 1.6, "t_fixed_s": 0.02, "c_p": 0.85, "u_mem": 0.4}, {"albert.mem": 2.5}
    )
    rows = []
    for model in ("bert-base", "albert-base", "resnet50", "vit-b16", "gpt2"):
        kind, size = default_size(model)
        for prec in ("bf16", "fp32"):
            for n in (1, 4):
                for b in (32, 128):
                    for limit in (None, 250.0):
                        rows.append(
                            Measurement(model, b * n, prec, n, "a100-40gb", 1.0, None, limit, **{kind: size})
                        )
    pred = Oracle(truth).predict_rows([m.workload() for m in rows], placements_of(rows))
    rng = np.random.default_rng(1)
    noisy = [
        dataclasses.replace(
            m, step_time_s=float(t * rng.normal(1, 0.03)), avg_power_w=float(p * rng.normal(1, 0.03))
        )
        for m, t, p in zip(rows, pred.step_time_s, pred.power_w)
    ]
    free = ["beta_gemm", "c_mem", "t_fixed_s", "c_p", "u_mem", "albert.mem"]
    res = calibrate(noisy, free=free, maxiter=200, seed=0)
    print(
        f"calibration, synthetic {len(rows)} rows (3% noise), {len(free)} free: {res.wall_s:.2f} s, {res.nfev} evaluations"
    )
    for name in free:
        print(f"  {name}: true {truth.vector([name])[0]:.4g} fitted {res.params.vector([name])[0]:.4g}")
    free_all = default_free(noisy)
    res = calibrate(noisy, free=free_all, maxiter=200, seed=0)
    print(
        f"calibration, synthetic, default free set ({len(free_all)} params): {res.wall_s:.2f} s, loss {res.fit.loss:.2f}"
    )


def bench_measured() -> None:
    params = load_params()
    for path in sorted(glob.glob(os.path.join(ROOT, "data", "oracle", "*.csv"))):
        rows = read_measurements(path)
        fit = score(params, rows)
        power = "-" if fit.mape_power is None else f"{fit.mape_power:.2f}%"
        print(
            f"{os.path.relpath(path, ROOT)}: {len(rows)} rows, shipped params {params.version}: MAPE time {fit.mape_time:.2f}% power {power}"
        )
        free = list(params.meta.get("free") or default_free(rows))
        folds = cross_validate(rows, k=min(4, len(rows)), free=free, maxiter=200)
        cv = sum(f.mape_time * f.n_rows for f in folds) / len(rows)
        print(f"  {len(folds)}-fold cross-validated MAPE time (held out): {cv:.2f}%")
        uncal = score(OracleParams(), rows)
        print(f"  uncalibrated priors: MAPE time {uncal.mape_time:.2f}%")


if __name__ == "__main__":
    bench_predict()
    bench_spread()
    bench_calibration()
    bench_measured()
