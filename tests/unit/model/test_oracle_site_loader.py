"""A site's data-loader floor (`easlurm model calibrate --site`): refitted where the site's real-input rows are
loader-bound, kept otherwise. The rows are made by the oracle itself with another loader floor, so the floor
the calibration must find is known."""

import dataclasses

import numpy as np
import pytest

from easlurm.cli import main
from easlurm.model.fit.dataset import Measurement, placements_of, write_measurements
from easlurm.model.fit.site import (
    LOADER_MIN_ROWS,
    LOADER_PARAM,
    calibrate_site,
    loader_bound,
    loader_rows,
    site_free,
)
from easlurm.model.hardware import load_catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams, load_params

GPU = "v100-pcie"
FACTOR = f"gpu:{GPU}.{LOADER_PARAM}"
FAST = {"maxiter": 12, "popsize": 5}
#: the made-up site's loader floor: 1.7 times the shipped one (the typical host's, 41 ms), as the Zeus P100/RTX
#: 6000 machine's 64 ms against it
SITE_FLOOR_S = 0.070


def _site_rows(floor_s: float, batches: tuple[int, ...], gpu: str = GPU) -> list[Measurement]:
    """CIFAR ShuffleNet and ResNet-50 steps with a real data loader, as the shipped oracle predicts them on a
    host whose loader takes `floor_s` a step (time only, default power limit)."""
    shipped = load_params()
    host = shipped.replace([LOADER_PARAM], [floor_s])
    rows = [
        Measurement(model, b, "fp32", 1, gpu, 1.0, image_size=size, optimizer="adam", input="real")
        for model, size in (("shufflenet-v2-cifar", 32), ("resnet50", 224))
        for b in batches
    ]
    pred = Oracle(host, load_catalogue(), cache_size=0).predict_rows(
        [m.workload() for m in rows], placements_of(rows)
    )
    return [dataclasses.replace(m, step_time_s=float(t)) for m, t in zip(rows, pred.step_time_s)]


def _floor(params: OracleParams, gpu: str = GPU) -> float:
    """A GPU type's effective loader floor (the shared value times its site factor)."""
    return params[LOADER_PARAM] * params.scalars.get(f"gpu:{gpu}.{LOADER_PARAM}", 1.0)


@pytest.fixture(scope="module")
def small_batches() -> list[Measurement]:
    return _site_rows(SITE_FLOOR_S, (8, 16, 32, 64, 128, 256))


def test_small_batches_of_a_slower_host_are_loader_bound(small_batches):
    """The made-up host's small ShuffleNet batches wait for the loader: the shipped parameters' step with
    the input already on the GPU is well under their step; large ResNet-50 batches are not."""
    bound = loader_bound(small_batches, load_params(), load_catalogue())
    by_row = {(m.model, m.batch): bool(b) for m, b in zip(small_batches, bound)}
    assert by_row[("shufflenet-v2-cifar", 8)] and by_row[("shufflenet-v2-cifar", 32)]
    assert not by_row[("resnet50", 256)]
    assert sum(bound) >= LOADER_MIN_ROWS


def test_calibration_finds_the_sites_loader_floor(small_batches):
    """Fitted from the shipped parameters, the site's floor comes within 10 % of the one that made the rows
    (1.7 times the shipped floor), and the rows' time error falls."""
    shipped = load_params()
    assert 1.5 * _floor(shipped) < SITE_FLOOR_S
    site = calibrate_site(small_batches, shipped, load_catalogue(), **FAST)
    assert FACTOR in site.result.free
    assert _floor(site.result.params) == pytest.approx(SITE_FLOOR_S, rel=0.10)
    assert site.result.fit.mape_time < 0.5 * site.before.mape_time


def test_loader_floor_is_kept_without_loader_bound_rows():
    """Large batches (GPU-bound), or synthetic input, do not identify the host's loader: its factor is not
    fitted, and the shipped floor stays, whatever floor made the rows."""
    cat, shipped = load_catalogue(), load_params()
    large = _site_rows(SITE_FLOOR_S, (512, 1024))
    assert not loader_bound(large, shipped, cat).any()
    assert FACTOR not in site_free(large, cat, loader_rows(large, shipped, cat))
    synthetic = [dataclasses.replace(m, input="synthetic") for m in _site_rows(SITE_FLOOR_S, (8, 16, 32))]
    assert FACTOR not in site_free(synthetic, cat, loader_rows(synthetic, shipped, cat))


def test_too_few_loader_bound_rows_keep_the_floor():
    """Fewer than LOADER_MIN_ROWS loader-bound rows: the floor is not refitted (one or two steps can be a
    slow host's noise)."""
    rows = _site_rows(SITE_FLOOR_S * 3, (8, 16))[:2]  # ShuffleNet at batch 8 and 16 only
    bound = loader_bound(rows, load_params(), load_catalogue())
    assert 0 < sum(bound) < LOADER_MIN_ROWS
    assert FACTOR not in site_free(rows, load_catalogue(), loader_rows(rows, load_params(), load_catalogue()))


def test_another_gpu_type_keeps_its_loader_floor(small_batches):
    """The factor scales the site's GPU type only: a real-input step on another GPU is predicted as before."""
    shipped = load_params()
    site = calibrate_site(small_batches, shipped, load_catalogue(), **FAST)
    other = _site_rows(SITE_FLOOR_S, (8, 16), gpu="t4")
    wls, pl = [m.workload() for m in other], placements_of(other)
    before = Oracle(shipped, cache_size=0).predict_rows(wls, pl).step_time_s
    after = Oracle(site.result.params, cache_size=0).predict_rows(wls, pl).step_time_s
    assert np.array_equal(before, after)
    assert _floor(site.result.params, "t4") == _floor(shipped, "t4")


def test_cli_says_what_it_did_with_the_loader_floor(tmp_path, capsys, small_batches):
    """`easlurm model calibrate --site` names each GPU type's loader-bound rows and the floor it fitted, and the
    parameter file records it (`calibration.loader`)."""
    data = tmp_path / "site.csv"
    write_measurements(small_batches, data)
    out = tmp_path / "site.yaml"
    argv = ["model", "calibrate", "--site", str(data), "-O", str(out), "--folds", "0", "--maxiter", "12"]
    assert main([*argv, "--popsize", "5"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "data loader on v100-pcie" in x)
    n_bound = int(sum(loader_bound(small_batches, load_params(), load_catalogue())))
    assert f"{n_bound} loader-bound real-input rows, floor refitted" in line
    ms = 1e3 * load_params(out).meta["loader"][GPU]["t_input_step_s"]
    assert f"{ms:.1f} ms a step" in line and ms == pytest.approx(1e3 * SITE_FLOOR_S, rel=0.10)
    assert load_params(out).meta["loader"][GPU]["refitted"] is True
