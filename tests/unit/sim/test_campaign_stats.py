"""Campaign statistics: bootstrap CI of the mean and Mann-Whitney U between policies."""

from __future__ import annotations

import numpy as np
import pytest

from easlurm.stats import bootstrap_ci, mean_of, pairwise_mann_whitney, summarize


def _rows(values: dict[str, list[float | None]], metric: str = "energy_j") -> list[dict]:
    return [
        {"experiment": "e", "scenario": "B", "load_jobs_per_h": None, "label": lab, "seed": i, metric: v}
        for lab, vs in values.items()
        for i, v in enumerate(vs)
    ]


def test_bootstrap_ci_brackets_the_mean_is_seeded_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(1)
    small, large = rng.normal(10, 2, 10), rng.normal(10, 2, 1000)
    lo, hi = bootstrap_ci(small, seed=3)
    assert lo < small.mean() < hi
    assert bootstrap_ci(small, seed=3) == (lo, hi)
    assert bootstrap_ci(small, seed=4) != (lo, hi)
    lo2, hi2 = bootstrap_ci(large, seed=3)
    assert hi2 - lo2 < (hi - lo) / 3
    assert bootstrap_ci([5.0]) is None


def test_bootstrap_coverage_is_near_95_percent() -> None:
    """Over many samples of a known distribution, the interval holds the true mean most of the time."""
    rng = np.random.default_rng(0)
    hits = 0
    for k in range(200):
        ci = bootstrap_ci(rng.normal(3.0, 1.0, 30), n_boot=500, seed=k)
        assert ci is not None
        hits += ci[0] <= 3.0 <= ci[1]
    assert 0.88 <= hits / 200 <= 0.99


def test_summaries_skip_missing_values() -> None:
    rows = _rows({"zeus": [1.0, None, 3.0], "pollux": [None, None]})
    s = summarize(rows, ["energy_j"])
    zeus = mean_of(s, "energy_j", label="zeus")
    pollux = mean_of(s, "energy_j", label="pollux")
    assert zeus is not None and zeus.n == 2 and zeus.mean == pytest.approx(2.0)
    assert pollux is not None and pollux.n == 0 and pollux.mean is None


def test_mann_whitney_separates_distinct_policies_only() -> None:
    rng = np.random.default_rng(2)
    rows = _rows(
        {
            "pollux": list(rng.normal(57, 1, 10)),
            "zeus": list(rng.normal(51, 1, 10)),
            "twin": list(rng.normal(51, 1, 10)),
            "flat": [4.0] * 10,
            "flat2": [4.0] * 10,
        }
    )
    tests = {(t.label_a, t.label_b): t for t in pairwise_mann_whitney(rows, ["energy_j"])}
    assert len(tests) == 10
    assert tests[("pollux", "zeus")].p_value < 0.001
    assert tests[("zeus", "twin")].p_value > 0.01
    assert tests[("flat", "flat2")].p_value == 1.0
    assert tests[("pollux", "zeus")].u == 100.0  # every pollux value above every zeus value


def test_tests_stay_within_a_cell() -> None:
    rows = _rows({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    other = [dict(r, scenario="C", label="c") for r in rows]
    pairs = {(t.cell[1], t.label_a, t.label_b) for t in pairwise_mann_whitney(rows + other, ["energy_j"])}
    assert pairs == {("B", "a", "b")}


def test_paired_test_sees_a_small_shift_that_the_unpaired_one_misses() -> None:
    """Same seed = same job stream: a constant 1% saving hides in seed noise unless values are paired."""
    rng = np.random.default_rng(5)
    base = rng.normal(50, 5, 10)
    rows = _rows({"pollux": list(base), "zeus": list(base * 0.99 + rng.normal(0, 0.01, 10))})
    (t,) = pairwise_mann_whitney(rows, ["energy_j"])
    assert t.p_value > 0.3
    assert t.p_paired is not None and t.p_paired < 0.01
    assert t.median_diff is not None and t.median_diff > 0
    unpaired = [dict(r, seed=r["seed"] + (100 if r["label"] == "zeus" else 0)) for r in rows]
    (u,) = pairwise_mann_whitney(unpaired, ["energy_j"])
    assert u.p_paired is None and u.p_value == t.p_value
