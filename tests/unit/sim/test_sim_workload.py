"""Workload generator, scenarios, cluster files, metrics helpers and the `sim run` command."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from easlurm.cli import cli
from easlurm.errors import ConfigError
from easlurm.model import Oracle
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine import Truth
from easlurm.sim.metrics import jain_index
from easlurm.sim.scenarios import SCENARIOS, get_scenario
from easlurm.sim.workload import WorkloadSettings, poisson_jobs

GPUS = {"a100-40gb": 8, "h100-sxm": 8}


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth(Oracle())


def test_poisson_stream_rate_urgency_and_deadlines(truth: Truth) -> None:
    jobs = list(poisson_jobs(WorkloadSettings(load_jobs_per_h=36.0), truth, GPUS, seed=7, max_jobs=2000))
    gaps = [b.submit_s - a.submit_s for a, b in itertools.pairwise(jobs)]
    assert sum(gaps) / len(gaps) == pytest.approx(100.0, rel=0.08)
    urgent = [j for j in jobs if j.urgent]
    assert len(urgent) / len(jobs) == pytest.approx(0.10, abs=0.025)
    for j in urgent[:20]:
        assert j.deadline_s is not None
        fastest = truth.fastest_runtime_s(j, GPUS)
        assert j.deadline_s - j.submit_s == pytest.approx(3.5 * fastest)
    assert all(j.deadline_s is None for j in jobs if not j.urgent)
    assert {j.model for j in jobs} == {"vit-b16", "albert-base", "resnet50"}
    assert len({j.user for j in jobs}) == 5


def test_stream_is_a_function_of_the_seed(truth: Truth) -> None:
    a = list(poisson_jobs(WorkloadSettings(), truth, GPUS, seed=1, horizon_s=7200.0))
    b = list(poisson_jobs(WorkloadSettings(), truth, GPUS, seed=1, horizon_s=7200.0))
    c = list(poisson_jobs(WorkloadSettings(), truth, GPUS, seed=2, horizon_s=7200.0))
    assert a == b and a != c
    assert all(j.submit_s < 7200.0 for j in a)


def test_majority_user_submits_half_the_jobs(truth: Truth) -> None:
    jobs = list(poisson_jobs(get_scenario("E").workload, truth, GPUS, seed=3, max_jobs=1500))
    share = sum(j.user == "u0" for j in jobs) / len(jobs)
    assert share == pytest.approx(0.5, abs=0.05)


def test_scenarios_follow_the_thesis_protocol() -> None:
    assert set(SCENARIOS) == {"A", "B", "C", "D", "E", "charon-budget", "coloc-small", "coloc-large"}
    assert get_scenario("b").load_jobs_per_h == pytest.approx(18.0)
    assert get_scenario("charon-budget").power_budget_w == 4500.0
    assert len(get_scenario("D").loads_jobs_per_h) >= 5
    assert all(sc.hours == 10.0 for sc in SCENARIOS.values())
    with pytest.raises(ConfigError):
        get_scenario("Z")


def test_cluster_yaml_and_helpers(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "name: mix\nnodes:\n  - {name: a, gpu_type: a100, gpus: 8, count: 2}\n  - {gpu_type: h100-sxm, gpus: 4}\n"
    )
    c = ClusterSpec.from_yaml(f)
    assert [n.name for n in c.nodes] == ["a0", "a1", "h100n"]
    assert c.n_gpus == 20
    assert c.resolved(Oracle().catalogue).gpu_types == ("a100-40gb", "h100-sxm")
    assert ClusterSpec.default().gpus_by_type() == {"a100-40gb": 8, "h100-sxm": 8}
    assert ClusterSpec.uniform(128, 8, "h100-sxm").n_gpus == 1024
    f.write_text("nodes:\n  - {gpu_type: a100, gpus: 8, colour: red}\n")
    with pytest.raises(ConfigError, match="colour"):
        ClusterSpec.from_yaml(f)


def test_jain_index() -> None:
    assert jain_index([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert math.isnan(jain_index([]))


def test_sim_run_command_prints_metrics_and_json() -> None:
    runner = CliRunner()
    out = runner.invoke(
        cli, ["sim", "run", "--policy", "zeus", "--scenario", "B", "--seed", "1", "--hours", "2"]
    )
    assert out.exit_code == 0, out.output
    assert "Throughput (jobs/h)" in out.output
    out = runner.invoke(
        cli,
        [
            "sim",
            "run",
            "--policy",
            "charon",
            "--scenario",
            "charon-budget",
            "--hours",
            "2",
            "--power-budget",
            "4kW",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["spec"]["power_budget_w"] == 4000.0
    assert doc["metrics"]["power_budget_w"] == 4000.0
    assert len(doc["power_w"]) == len(doc["power_times_s"])
