"""A frozen record built without its __init__ is the record its __init__ builds."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from easlurm.frozen import builder
from easlurm.sim.traces.record import TraceJob
from easlurm.slurm.sacct_jobs import SacctJob


def test_built_records_equal_constructed_ones_with_fresh_default_dicts() -> None:
    make = builder(SacctJob)
    values = {"job_id": "7", "state": "COMPLETED", "submit_s": 1.0, "alloc_tres": {"cpu": 2.0}, "n_gpus": 2}
    built, plain = make(**values), SacctJob(**values)
    assert built == plain and repr(built) == repr(plain)
    assert make(job_id="1").req_tres == {} and make(job_id="1").req_tres is not make(job_id="2").req_tres
    with pytest.raises(AttributeError):
        built.state = "FAILED"  # type: ignore[misc]
    trace_job = builder(TraceJob)(job_id="3", submit_s=2.0, n_gpus=4)
    assert trace_job == TraceJob(job_id="3", submit_s=2.0, n_gpus=4)
    assert (
        hash(trace_job) == hash(TraceJob(job_id="3", submit_s=2.0, n_gpus=4))
        and trace_job.het_components == 1
    )


def test_a_record_with_post_init_is_refused() -> None:
    @dataclass(frozen=True)
    class Checked:
        x: int
        tags: list[str] = field(default_factory=list)

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x")

    with pytest.raises(TypeError, match="Checked"):
        builder(Checked)
