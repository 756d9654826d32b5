"""What docs/evaluate.md quotes: the oracle's and the random forest's errors on the H100 measurements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.config import load_config
from easlurm.docfigs.figures import DocFigures, table
from easlurm.model.build import oracle_params, params_setting
from easlurm.model.fit.baseline import baseline_fitter
from easlurm.model.fit.dataset import read_measurements
from easlurm.model.fit.evaluate import (
    calibrating_oracle,
    evaluate_method,
    fixed_oracle,
    make_splits,
    parse_cv,
)
from easlurm.model.params import OracleParams

DATA = "data/oracle/h100_sxm_training_steps.csv"
SCHEMES = ("none", "leave-one-model-out", "kfold:5")


@dataclass(frozen=True)
class Evaluation:
    """Per cross-validation scheme, the oracle's and the baseline's MethodReport (as `easlurm model
    evaluate` computes them with its defaults: maxiter 200, popsize 15, seed 0, refits from the priors)."""

    params_version: str
    n_rows: int
    n_models: int
    oracle: dict[str, Any]
    forest: dict[str, Any]


def evaluate_source(root: Path, work_dir: Path, jobs: int) -> Evaluation:
    rows = read_measurements(root / DATA)
    shipped = oracle_params(params_setting(load_config()))
    oracle, forest = {}, {}
    for text in SCHEMES:
        scheme = parse_cv(text)
        splits = make_splits(rows, scheme, 0)
        fit = (
            calibrating_oracle(OracleParams(), maxiter=200, popsize=15, seed=0)
            if scheme.held_out
            else fixed_oracle(shipped)
        )
        oracle[text] = evaluate_method(rows, splits, fit, "oracle", "", scheme.label, jobs=jobs)
        forest[text] = evaluate_method(
            rows, splits, baseline_fitter("rf", 0), "baseline-rf", "", scheme.label, jobs=jobs
        )
    return Evaluation(shipped.version, len(rows), len({r.model for r in rows}), oracle, forest)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} %"


def _pair(rep: Any) -> str:
    return f"{_pct(rep.mape_time)} / {_pct(rep.mape_power)}"


def evaluate_figures(ev: Evaluation) -> dict[str, str]:
    o, f, lomo = ev.oracle, ev.forest, "leave-one-model-out"
    rows = [
        [
            f"shipped params `{ev.params_version}`, as given (in-sample)",
            _pct(o["none"].mape_time),
            _pct(o["none"].mape_power),
        ],
        [
            "leave-one-model-out (`--cv leave-one-model-out`)",
            _pct(o[lomo].mape_time),
            _pct(o[lomo].mape_power),
        ],
        ["kfold:5", _pct(o["kfold:5"].mape_time), _pct(o["kfold:5"].mape_power)],
    ]
    per_model = ", ".join(
        f"{m.model} {m.mape_time:.1f}/{m.mape_power:.1f} %"
        for m in o[lomo].per_model()
        if m.mape_time is not None and m.mape_power is not None
    )
    text = (
        f"Leave-one-model-out per model (time/power): {per_model}. The random-forest baseline on the same "
        f"splits: {_pair(f[lomo])} (kfold:5 {_pair(f['kfold:5'])}, in-sample {_pair(f['none'])})"
    )
    if (f[lomo].mape_time or 0.0) > (o[lomo].mape_time or 0.0):
        text += ": it fits rows it has seen, the physics carries over to a model it has not."
    else:
        text += ": on a model it has not seen the forest does as well as the physics."
    return {
        "evaluate/data": f"{ev.n_rows} rows, {ev.n_models} models, H100 SXM",
        "evaluate/table": table(["oracle", "time MAPE", "power MAPE"], rows),
        "evaluate/per-model": text,
    }


FIGURES = DocFigures("docs/evaluate.md", DATA, evaluate_source, evaluate_figures)
