"""Parameter files shipped before the current one still load and predict, from Python and from `predict`."""

import json
from pathlib import Path

import numpy as np

from easlurm.cli import main
from easlurm.model import Oracle, Placements, get_workload
from easlurm.model.params import load_params

PREVIOUS = Path(__file__).resolve().parents[2] / "fixtures" / "params" / "2026-11-24.4-energy-per-flop.yaml"


def test_the_previous_shipped_parameters_still_load_and_predict(capsys):
    """The file shipped before the eager-attention refit (t_conv_wave_s was not in it, so it keeps its
    prior) predicts a finite step that differs from the current parameters'."""
    old, new = load_params(PREVIOUS), load_params()
    assert old.version == "2026-11-24.4-energy-per-flop" and new.version != old.version
    assert "t_conv_wave_s" not in old.meta["free"]
    w, pl = get_workload("resnet50", precision="bf16"), Placements.of([1, 8], [64, 512], "a100-40gb")
    t_old = Oracle(old).predict(w, pl).step_time_s
    t_new = Oracle(new).predict(w, pl).step_time_s
    assert np.all(np.isfinite(t_old)) and not np.allclose(t_old, t_new)
    rc = main(
        ["predict", "--model", "resnet50", "--batch", "64", "--gpu", "a100-40gb", "--params", str(PREVIOUS)]
    )
    out = capsys.readouterr().out
    assert rc == 0
    rc = main(
        [
            "predict",
            "--model",
            "resnet50",
            "--batch",
            "64",
            "--gpu",
            "a100-40gb",
            "--params",
            str(PREVIOUS),
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["params_version"] == old.version and out
