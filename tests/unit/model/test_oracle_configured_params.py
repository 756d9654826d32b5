"""Calibrated oracle parameters named by the configuration (`oracle.params` in a `-c` file, the
environment, `--params`) reach every oracle: `predict`, the simulator (and its worker processes through
EASLURM_ORACLE__PARAMS), trace replay and the daemon; a bad file is one line before any work."""

import dataclasses
import json

import pytest

from easlurm.cli import main
from easlurm.model.build import PARAMS_ENV, build_oracle, oracle_params
from easlurm.model.params import load_params, save_params


@pytest.fixture(autouse=True)
def _no_inherited_params(monkeypatch):
    """Commands export the file for their child processes; keep each test's environment its own."""
    monkeypatch.delenv(PARAMS_ENV, raising=False)


@pytest.fixture
def slow_host(tmp_path):
    """A parameter file whose host op costs 20x the shipped one: launch-bound steps get much slower."""
    shipped = load_params()
    values = dict(shipped.values)
    values["t_host_op_s"] = 20 * values["t_host_op_s"]
    path = tmp_path / "slow-host.yaml"
    save_params(dataclasses.replace(shipped, values=values, version="test-slow-host"), path)
    return path


def sim_json(capsys, *argv):
    rc = main(
        [*argv, "sim", "run", "--policy", "zeus", "--hours", "2", "--seed", "3", "--noise", "0", "--json"]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_every_oracle_built_without_flags_sees_the_configured_params(monkeypatch, slow_host):
    from easlurm.sim.runner import make_oracles

    assert build_oracle().params.version == load_params().version
    monkeypatch.setenv(PARAMS_ENV, str(slow_host))
    assert build_oracle().params.version == "test-slow-host"
    seen, truth = make_oracles(0.1, seed=1)
    assert seen.params.version == truth.params.version == "test-slow-host"
    assert oracle_params(slow_host) is oracle_params(str(slow_host))  # parsed once per file version


def test_config_file_params_change_the_simulation(capsys, tmp_path, slow_host):
    cfg = tmp_path / "easlurm.yaml"
    cfg.write_text(f"oracle:\n  params: {slow_host}\n")
    base = sim_json(capsys)
    slow = sim_json(capsys, "-c", str(cfg))
    # launch-bound steps take longer and draw less: the run's energy per job moves (its direction depends on
    # which jobs finish within the two hours)
    ratio = slow["metrics"]["energy_per_job_j"] / base["metrics"]["energy_per_job_j"]
    assert abs(ratio - 1.0) > 0.05


def test_a_missing_params_file_is_one_line_before_any_work(capsys, tmp_path):
    cfg = tmp_path / "easlurm.yaml"
    cfg.write_text(f"oracle:\n  params: {tmp_path / 'nope.yaml'}\n")
    rc = main(["-c", str(cfg), "sim", "run", "--policy", "zeus", "--hours", "1"])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert len(err.splitlines()) == 1 and "nope.yaml: cannot read oracle parameters" in err
