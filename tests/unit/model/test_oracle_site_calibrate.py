"""A site's own calibration (`easlurm model calibrate --site`): per-GPU-type factors fitted on the site's rows
from the shipped parameters; every other GPU type keeps its predictions bit for bit."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from easlurm.cli import main
from easlurm.errors import ModelError
from easlurm.model.fit.calibrate import PRIOR_SIGMA_LOG10, calibrate, score
from easlurm.model.fit.dataset import read_measurements, write_measurements
from easlurm.model.fit.site import SITE_PRIOR_SIGMA_LOG10, calibrate_site, site_free, site_leave_one_model_out
from easlurm.model.hardware import load_catalogue
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import OracleParams, is_gpu_factor, load_params, save_params
from easlurm.model.zoo import get_workload

H100_CSV = Path(__file__).resolve().parents[3] / "data" / "oracle" / "h100_sxm_training_steps.csv"
FAST = {"maxiter": 12, "popsize": 5}


@pytest.fixture(scope="module")
def site_rows():
    """The H100 rows of two transformer models at 16-bit and TF32 (a small site)."""
    rows = read_measurements(H100_CSV)
    return [m for m in rows if m.model in ("bert-base", "gpt2") and m.precision_key in ("bf16", "tf32")]


@pytest.fixture(scope="module")
def fitted(site_rows):
    return calibrate_site(site_rows, load_params(), load_catalogue(), **FAST)


def _predict(params, gpus):
    """Several workloads on each GPU type: one GPU and eight, default limit and a cap."""
    oracle = Oracle(params, load_catalogue(), cache_size=0)
    wls = [get_workload(m, precision="bf16") for m in ("bert-base", "resnet50", "vit-b16")]
    specs = {g: oracle.catalogue.get(g) for g in gpus}
    caps = {g: [np.nan, max(s.min_power_limit_w, 0.7 * s.tdp_w)] for g, s in specs.items()}
    grid = [(n, g, lim) for g in gpus for n in (1, 8) for lim in caps[g]]
    pl = Placements.of(
        np.array([n for n, _, _ in grid]),
        np.array([64 * n for n, _, _ in grid]),
        np.array([g for _, g, _ in grid], dtype=object),
        np.array([lim for _, _, lim in grid]),
    )
    res = oracle.predict_many(wls, pl)
    return np.asarray(res.step_time_s), np.asarray(res.power_w)


def test_free_set_is_factors_of_the_site_gpu_types_only(site_rows):
    """Only 'gpu:<key>.<param>' names of the rows' GPU types, and only terms the rows inform."""
    free = site_free(site_rows, load_catalogue())
    assert free and all(is_gpu_factor(n) and n.startswith("gpu:h100-sxm.") for n in free)
    names = {n.rpartition(".")[2] for n in free}
    assert {"beta_gemm", "c_p", "u_comp", "c_tf32"} <= names
    assert "beta_conv" not in names  # no convolution among these rows
    assert "cap_alpha" not in names  # no power-limit sweep among them


def test_other_gpu_types_predict_bit_identically(fitted):
    """A GPU type the site's rows do not name (an H200 and an H100 PCIe of the same architecture included)
    is predicted exactly as with the starting parameters; the site's own GPU is not."""
    base = load_params()
    others = ["a100-40gb", "h200", "h100-pcie", "v100", "t4"]
    t0, p0 = _predict(base, others)
    t1, p1 = _predict(fitted.result.params, others)
    assert np.array_equal(t0, t1, equal_nan=True)
    assert np.array_equal(p0, p1, equal_nan=True)
    s0, _ = _predict(base, ["h100-sxm"])
    s1, _ = _predict(fitted.result.params, ["h100-sxm"])
    assert not np.allclose(s0, s1)


def test_only_site_factors_move(fitted):
    """Global values (activation memory scale included), architecture factors and targeted scalars stay."""
    base = load_params()
    params = fitted.result.params
    assert dict(params.values) == dict(base.values)
    kept = {k: v for k, v in params.scalars.items() if not is_gpu_factor(k)}
    assert kept == dict(base.scalars)
    assert set(params.scalars) - set(base.scalars) == set(fitted.result.free)


def test_site_fit_lowers_the_error_on_its_rows(site_rows, fitted):
    assert fitted.before.loss == pytest.approx(score(load_params(), site_rows).loss)
    assert fitted.result.fit.loss < fitted.before.loss
    assert fitted.result.fit.mape_time < fitted.before.mape_time


@pytest.mark.parametrize("off", [0.8, 1.25])
def test_site_fit_takes_back_what_its_gpu_runs_off_the_shared_physics(site_rows, fitted, off):
    """A site whose GPU runs GEMMs 25 % off what the shared parameters say (the Hopper factor of the base
    scaled): its own rows' error grows by more than a point of loss, and its calibration takes back at least
    half of what was added. (How much a calibration gains from the shipped parameters themselves depends on
    how close their last refit already is on these rows: 0.3 points from `2026-11-27.1-eager-attention`, 8.5
    from the parameters before it.)"""
    base = load_params()
    shifted = base.replace(["hopper.beta_gemm"], [off * base.scalars["hopper.beta_gemm"]])
    site = calibrate_site(site_rows, shifted, load_catalogue(), **FAST)
    added = site.before.loss - fitted.before.loss
    assert added > 1.0
    assert site.result.fit.loss - fitted.before.loss < 0.5 * added


def test_site_factors_have_a_narrower_prior_than_a_global_fit(site_rows, fitted):
    """The same factors fitted with the global prior width (a factor of 2 per point of loss) move further
    from the base than the site's (a factor of 1.26): a site's few models must not pull its GPU's factors
    onto their own errors."""
    assert SITE_PRIOR_SIGMA_LOG10 < PRIOR_SIGMA_LOG10
    free = list(fitted.result.free)
    wide = calibrate(site_rows, load_params(), free, catalogue=load_catalogue(), memory=False, **FAST)

    def spread(params: OracleParams) -> float:
        return float(np.sqrt(np.mean([np.log10(params.scalars[n]) ** 2 for n in free])))

    assert spread(fitted.result.params) < 0.7 * spread(wide.params)


def test_the_sites_own_convolution_layout_keeps_the_global_width():
    """A site that runs plain PyTorch keeps its CNNs in NCHW and pays layout transforms around each 16-bit
    convolution, where the public channels-last runs behind the shipped value do not: its ResNet-50 rows move
    `k_layout` as far as they need (the narrow prior would hold it near 1.0), the other factors stay close."""
    rows = [m for m in read_measurements(H100_CSV) if m.model == "resnet50"]
    site = calibrate_site(rows, load_params(), load_catalogue(), **FAST)
    factors = {n.rpartition(".")[2]: site.result.params.scalars[n] for n in site.result.free}
    assert factors["k_layout"] > 1.5
    assert all(0.8 < v < 1.25 for n, v in factors.items() if n != "k_layout")
    assert site.result.fit.mape_time < 0.5 * site.before.mape_time


def test_prior_weight_holds_free_parameters_at_the_base(site_rows, fitted):
    """A prior weight large enough leaves every free factor at its starting value of 1.0."""
    free = list(fitted.result.free)
    held = calibrate(
        site_rows, load_params(), free, catalogue=load_catalogue(), memory=False, prior_weight=1e6, **FAST
    )
    assert [held.params.scalars[n] for n in free] == pytest.approx([1.0] * len(free), abs=0.01)


def test_each_model_before_and_after(site_rows, fitted):
    """Each model's errors before and after, scored on that model's rows only."""
    assert sorted(fitted.before_by_model) == sorted(fitted.after_by_model) == ["bert-base", "gpt2"]
    bert = [m for m in site_rows if m.model == "bert-base"]
    assert fitted.before_by_model["bert-base"].mape_time == pytest.approx(
        score(load_params(), bert).mape_time
    )
    assert fitted.after_by_model["bert-base"].mape_time == pytest.approx(
        score(fitted.result.params, bert).mape_time
    )
    assert sum(r.n_rows for r in fitted.after_by_model.values()) == len(site_rows)


def test_leave_one_model_out_holds_each_model_out(site_rows):
    held = site_leave_one_model_out(site_rows, load_params(), load_catalogue(), **FAST)
    assert [h.model for h in held] == ["bert-base", "gpt2"]
    assert [h.fit.n_rows for h in held] == [sum(m.model == h.model for m in site_rows) for h in held]
    with pytest.raises(ModelError, match="at least 2 models"):
        site_leave_one_model_out(site_rows[:1], load_params(), load_catalogue(), **FAST)


def test_gpu_factors_round_trip_and_bad_names(tmp_path, fitted):
    path = tmp_path / "site.yaml"
    save_params(fitted.result.params, path)
    again = load_params(path)
    assert {k: v for k, v in again.scalars.items() if is_gpu_factor(k)} == pytest.approx(
        {k: v for k, v in fitted.result.params.scalars.items() if is_gpu_factor(k)}, rel=1e-5
    )
    with pytest.raises(ModelError, match="GPU-type factor"):
        OracleParams(scalars={"gpu:h100-sxm.not_a_param": 1.1})
    with pytest.raises(ModelError, match="GPU-type factor"):
        OracleParams(scalars={"gpu:.beta_gemm": 1.1})


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_site_calibration_writes_a_file_predict_reads(tmp_path, capsys, site_rows, monkeypatch):
    data = tmp_path / "site.csv"
    write_measurements(site_rows, data)
    out = tmp_path / "site-params.yaml"
    rc, text, _ = _run(
        capsys, "model", "calibrate", "--site", str(data), "-O", str(out), "--maxiter", "8", "--popsize", "4"
    )
    assert rc == 0
    assert "before (base parameters)" in text and "leave-one-model-out" in text
    assert "bert-base" in text and "gpt2" in text
    table = text.splitlines()[
        text.splitlines().index(next(x for x in text.splitlines() if "per model" in x)) :
    ]
    assert "before" in table[0] and "after" in table[0] and "held out" in table[0]
    assert [line.split()[0] for line in table[1:3]] == ["bert-base", "gpt2"]
    assert all(line.count("%") == 3 for line in table[1:3])  # before, after and held out
    doc = load_params(out)
    assert doc.meta["kind"] == "site" and doc.meta["gpu_types"] == ["h100-sxm"]
    assert doc.meta["leave_one_model_out"]["mape_time_pct"] > 0
    assert doc.meta["prior_sigma_log10"] == SITE_PRIOR_SIGMA_LOG10
    assert doc.meta["prior_global_width"] == ["k_layout"]
    for when in ("before", "after"):
        assert sorted(doc.meta[when]["per_model"]) == ["bert-base", "gpt2"]
        assert doc.meta[when]["per_model"]["gpt2"]["mape_time_pct"] > 0
    args = ("predict", "--model", "bert-base", "--batch", "64", "--gpu", "h100-sxm,a100-40gb", "-P")
    _, shipped, _ = _run(capsys, *args)
    monkeypatch.setenv("EASLURM_ORACLE__PARAMS", str(out))
    rc, site, _ = _run(capsys, *args)
    assert rc == 0
    a100 = [line for line in site.splitlines() if line.startswith("a100-40gb|")]
    assert a100 and a100 == [line for line in shipped.splitlines() if line.startswith("a100-40gb|")]
    assert [x for x in site.splitlines() if x.startswith("h100-sxm|")] != [
        x for x in shipped.splitlines() if x.startswith("h100-sxm|")
    ]


@pytest.mark.parametrize(("extra", "named"), [(("--free", "c_mem"), "--free"), (("--scaling",), "--scaling")])
def test_cli_site_refuses_options_it_cannot_honour(tmp_path, capsys, site_rows, extra, named):
    data = tmp_path / "site.csv"
    write_measurements([dataclasses.replace(m) for m in site_rows], data)
    rc, _, err = _run(
        capsys, "model", "calibrate", "--site", str(data), "-O", str(tmp_path / "o.yaml"), *extra
    )
    assert rc == 2
    assert err.count("\n") == 1 and named in err
    assert not (tmp_path / "o.yaml").exists()
