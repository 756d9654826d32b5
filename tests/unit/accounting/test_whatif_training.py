"""`easlurm seff`'s what-ifs predict a declared job as its SPEC says it trains (precision=, shard=, ckpt=)."""

from __future__ import annotations

from easlurm.accounting.whatif import Placement, what_ifs
from easlurm.energy.spec import parse_spec
from easlurm.model.oracle import Oracle


def test_a_job_card_what_if_predicts_the_job_as_its_spec_trains_it() -> None:
    """`easlurm seff`'s what-ifs of a declared LLM job: none where the replicated model does not fit the
    job's own GPUs, every alternative where the SPEC lets it shard."""
    oracle, base = Oracle(), Placement("h100-sxm", 8, 8)
    assert what_ifs(oracle, parse_spec("model=llama3-8b,steps=10,batch=8"), base) == []
    sharded = what_ifs(oracle, parse_spec("model=llama3-8b,steps=10,batch=8,precision=bf16,shard=auto"), base)
    assert sharded and any(w.label for w in sharded)
