"""Job sizes and run times drawn with the shape of the Philly trace (for generated replay traces at scale).

Provenance: the job table of GitHub `DIR-LAB/Gen-Parallel-Workloads`, commit
`754ed471bc16e3e036013118658fd3f57f223406`, file `Philly/training_data/philly_data_training.csv`
(15,000 jobs of Microsoft's Philly DNN-training clusters, msr-fiddle/philly-traces; Jeon et al., USENIX
ATC 2019). Its first 100 jobs are `tests/fixtures/traces/public/philly_gen_parallel_workloads_training_head100.csv`
(where the source and its columns are described). From the whole table:

- `PHILLY_GPU_COUNTS`: how many jobs asked for each GPU count (`gpu_num`), exactly as counted;
- `PHILLY_RUNTIME_QUANTILES_S`: per size class (1, 2, 4, 8, 16 and more GPUs), the quantiles of
  `run_time` (seconds) at `PHILLY_QUANTILE_P` (numpy `inverted_cdf`: each is a run time of the table).

A run time is drawn by inverse transform: uniform p, then log-linear interpolation between the two
quantiles around p, so the draws keep the table's heavy tail (median 5 min for one GPU, 1% over 20
days). Arrival times are not taken from the table: the caller sets a Poisson rate for its cluster.
"""

from __future__ import annotations

import numpy as np

#: GPU count -> jobs of the Philly table with it (15,000 jobs)
PHILLY_GPU_COUNTS: dict[int, int] = {1: 11963, 2: 375, 4: 905, 8: 1477, 16: 243, 28: 1, 32: 33, 48: 3}

PHILLY_QUANTILE_P: tuple[float, ...] = (
    *(i / 20 for i in range(20)),
    0.98,
    0.99,
    0.995,
    0.999,
    1.0,
)

#: size class (least GPUs of the class) -> run time (s) at each of PHILLY_QUANTILE_P
PHILLY_RUNTIME_QUANTILES_S: dict[int, tuple[int, ...]] = {
    1: (1, 23, 38, 45, 51, 59, 68, 73, 80, 154, 213, 338, 730, 1081, 2388, 2679, 3684, 12895, 33275,
        184864, 1369321, 1777994, 2323172, 4810161, 5199751),
    2: (2, 10, 11, 13, 14, 15, 16, 17, 19, 20, 25, 194, 440, 985, 2300, 4293, 14404, 21047, 110093,
        445924, 1662248, 2078325, 2765813, 5065230, 5065230),
    4: (5, 16, 24, 34, 43, 53, 105, 250, 428, 628, 1316, 5453, 11974, 14407, 21731, 36220, 66573,
        135656, 235258, 440844, 881043, 1296489, 3616420, 5150116, 5150116),
    8: (5, 20, 27, 45, 53, 73, 162, 287, 518, 917, 2091, 3259, 5037, 10472, 18188, 35911, 71437,
        122935, 246930, 591972, 1195666, 2112182, 2898562, 4624798, 4721782),
    16: (7, 39, 52, 57, 68, 116, 355, 1376, 1411, 1480, 1562, 1634, 1937, 2753, 6687, 12563, 14407,
         48226, 76307, 237670, 453676, 587904, 856965, 890532, 890532),
}  # fmt: skip


def size_class(gpus: int) -> int:
    """The run-time class of a GPU count: the largest class bound not above it."""
    return max(c for c in PHILLY_RUNTIME_QUANTILES_S if c <= gpus)


def draw_jobs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(GPUs, run time in whole seconds, at least 1) of `n` jobs drawn with the Philly table's shape."""
    sizes = np.array(list(PHILLY_GPU_COUNTS), dtype=np.int64)
    weights = np.array(list(PHILLY_GPU_COUNTS.values()), dtype=np.float64)
    gpus = rng.choice(sizes, size=n, p=weights / weights.sum())
    u = rng.random(n)
    runtime = np.empty(n, dtype=np.float64)
    classes = np.array([size_class(int(g)) for g in sizes], dtype=np.int64)[np.searchsorted(sizes, gpus)]
    for c, q in PHILLY_RUNTIME_QUANTILES_S.items():
        mask = classes == c
        log_p = np.log(np.asarray(q, dtype=np.float64))
        runtime[mask] = np.exp(np.interp(u[mask], PHILLY_QUANTILE_P, log_p))
    return gpus, np.maximum(np.rint(runtime), 1).astype(np.int64)


def mean_gpu_s(rng: np.random.Generator, n: int = 200_000) -> float:
    """GPU-seconds per job of this shape (from `n` draws): what sets the arrival rate for a load."""
    gpus, runtime = draw_jobs(n, rng)
    return float(np.mean(gpus * runtime))
