"""A job list says how each job trains (precision, shard, ckpt): the simulator's policies and its ground truth
predict it that way, so an LLM that only fits sharded runs when its entry allows sharding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError
from easlurm.sim.jobs_yaml import jobs_from_doc

LLM = {"model": "llama3-8b", "steps": 50, "batch": 8, "gpus": 8}


def test_job_list_fields_reach_the_job() -> None:
    jobs = jobs_from_doc(
        {"jobs": [{**LLM, "id": "a", "precision": "bf16", "shard": "auto"}, {**LLM, "id": "b", "ckpt": 1}]},
        "list",
    )
    by_id = {j.job_id: j for j in jobs}
    assert (by_id["a"].precision, by_id["a"].sharding, by_id["a"].act_ckpt) == ("amp-bf16", "auto", "auto")
    assert (by_id["b"].sharding, by_id["b"].act_ckpt) == ("none", "full")
    with pytest.raises(ConfigError, match=r"list: jobs\[0\].shard: unknown sharding 'zero9'"):
        jobs_from_doc({"jobs": [{**LLM, "shard": "zero9"}]}, "list")
    with pytest.raises(ConfigError, match=r"list: jobs\[0\].ckpt: unknown activation checkpointing 'half'"):
        jobs_from_doc({"jobs": [{**LLM, "ckpt": "half"}]}, "list")


def test_only_the_llm_allowed_to_shard_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - {id: sharded, model: llama3-8b, steps: 50, batch: 8, gpus: 8, shard: auto}\n"
        "  - {id: plain, model: llama3-8b, steps: 50, batch: 8, gpus: 8, submit: 1s}\n"
    )
    rc = main(
        ["sim", "run", "--policy", "zeus", "--job-list", str(path), "--seed", "0", "--noise", "0", "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    ends = {j["job_id"]: j["end_s"] for j in doc["jobs"]}
    assert rc == 0 and ends["sharded"] is not None and ends["plain"] is None
