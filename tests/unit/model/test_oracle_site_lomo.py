"""Leave-one-model-out of a site calibration over many GPU types (`site_lomo`, the figures of
docs/oracle-calibrate.md and benchmarks/site_calibration_lomo.py)."""

from pathlib import Path

import pytest

from easlurm.model.fit.calibrate import score
from easlurm.model.fit.site import site_leave_one_model_out
from easlurm.model.fit.site_lomo import lomo_sweep, sites_of
from easlurm.model.hardware import load_catalogue
from easlurm.model.params import load_params

DATA = Path(__file__).resolve().parents[3] / "data" / "oracle"
FAST = {"maxiter": 5, "popsize": 4}


@pytest.fixture(scope="module")
def sites():
    return sites_of(
        [DATA / "h200_training_steps.csv", DATA / "public" / "lambda_pytorch.csv"],
        load_params(),
        load_catalogue(),
    )


def test_sites_are_gpu_types_of_a_file_with_two_models_or_more(sites):
    """Keys name the file and the GPU type; every site holds two models or more of one GPU type; rows the
    shipped parameters find out of memory are counted and left out."""
    assert "h200_training_steps:h200" in sites.rows and "lambda_pytorch:a100-40gb" in sites.rows
    cat = load_catalogue()
    for key, rows in sites.rows.items():
        assert len({m.model for m in rows}) >= 2
        assert {f"{key.partition(':')[0]}:{cat.resolve(m.gpu)}" for m in rows} == {key}
    assert sites.left_out >= 0
    assert list(sites.rows) == sorted(sites.rows)


def test_sweep_is_each_sites_leave_one_model_out_whatever_the_processes(sites):
    """Two sites in forked processes give what each site's own leave-one-model-out gives, in key order,
    with the starting parameters' error on all the site's rows beside it; a narrower prior holds the
    held-out figures closer to it."""
    base, cat = load_params(), load_catalogue()
    two = {k: sites.rows[k] for k in ("lambda_pytorch:a10", "lambda_pytorch:titan-rtx")}
    serial = lomo_sweep(two, base, cat, sigma_log10=0.1, jobs=1, **FAST)
    forked = lomo_sweep(two, base, cat, sigma_log10=0.1, jobs=2, **FAST)
    assert [s.key for s in serial] == list(two) == [s.key for s in forked]
    assert [[h.fit for h in s.held] for s in serial] == [[h.fit for h in f.held] for f in forked]
    first = serial[0]
    alone = site_leave_one_model_out(two[first.key], base, cat, sigma_log10=0.1, **FAST)
    assert [h.fit for h in first.held] == [h.fit for h in alone]
    assert first.before == score(base, two[first.key], cat) and first.n_rows == len(two[first.key])
    wide = lomo_sweep({first.key: two[first.key]}, base, cat, sigma_log10=0.3, **FAST)
    assert [h.fit.mape_time for h in wide[0].held] != [h.fit.mape_time for h in first.held]
