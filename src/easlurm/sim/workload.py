"""Poisson job streams from model templates (thesis 5.5.1): urgent share, deadlines, users, majority user."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from easlurm.errors import ConfigError
from easlurm.sim.engine.truth import Truth
from easlurm.sim.job import JobSpec

#: the reference placement a job's size is expressed on: "it runs N minutes on 8 A100-40GB"
REFERENCE_GPU = "a100-40gb"
REFERENCE_GPUS = 8


@dataclass(frozen=True)
class JobTemplate:
    """A model as the thesis trains it, with its malleable options (first entries are not special)."""

    model: str
    precision: str
    batch_options: tuple[int, ...]
    gpu_options: tuple[int, ...] = (1, 2, 4, 8)
    seq_len: int | None = None
    image_size: int | None = None
    #: jobs of this template declare they may share a GPU (SPEC `share`)
    shareable: bool = False


#: ViT-Base (FP32), ALBERT-base v2 (BF16), ResNet-50 (FP32), as in thesis 5.5.1
THESIS_TEMPLATES: tuple[JobTemplate, ...] = (
    JobTemplate("vit-b16", "fp32-strict", (64, 128, 256, 512)),
    JobTemplate("albert-base", "bf16", (32, 64, 128, 256)),
    JobTemplate("resnet50", "fp32-strict", (128, 256, 512, 1024)),
)


@dataclass(frozen=True)
class WorkloadSettings:
    """Arrival rate and mix. A job's size is its runtime on 8 A100-40GB at its largest batch, log-uniform
    in [runtime_min_s, runtime_max_s]: 3-25 min puts the thesis cluster at ~80-90% utilisation under
    Pollux at lambda = 0.005 jobs/s, the calibration target of thesis 5.5.1."""

    load_jobs_per_h: float = 18.0
    urgent_fraction: float = 0.10
    deadline_factor: float = 3.5
    n_users: int = 5
    majority_share: float | None = None
    malleable: bool = True
    runtime_min_s: float = 180.0
    runtime_max_s: float = 1500.0
    templates: tuple[JobTemplate, ...] = field(default=THESIS_TEMPLATES)
    #: the placement a job's size is expressed on (its largest batch on this many GPUs of this type)
    reference_gpu: str = REFERENCE_GPU
    reference_gpus: int = REFERENCE_GPUS

    def __post_init__(self) -> None:
        if self.load_jobs_per_h <= 0:
            raise ConfigError("workload: load_jobs_per_h must be > 0")
        if not 0 <= self.urgent_fraction <= 1:
            raise ConfigError("workload: urgent_fraction must lie in [0, 1]")
        if self.n_users < 1:
            raise ConfigError("workload: n_users must be >= 1")
        if self.majority_share is not None and not 0 < self.majority_share < 1:
            raise ConfigError("workload: majority_share must lie in (0, 1)")
        if not 0 < self.runtime_min_s <= self.runtime_max_s:
            raise ConfigError("workload: need 0 < runtime_min_s <= runtime_max_s")
        if self.reference_gpus < 1:
            raise ConfigError("workload: reference_gpus must be >= 1")


def poisson_jobs(
    settings: WorkloadSettings,
    truth: Truth,
    max_gpus_per_type: dict[str, int],
    *,
    seed: int,
    nodes_per_type: dict[str, int] | None = None,
    horizon_s: float | None = None,
    max_jobs: int | None = None,
) -> Iterator[JobSpec]:
    """Jobs in submit order, lazily; the stream depends only on the settings and the seed, so every
    policy sees the same jobs. Urgent jobs get a deadline of `deadline_factor` x their fastest runtime
    on this cluster (all options, fastest hardware)."""
    rng = np.random.default_rng([seed, 0x5EED])
    rate_per_s = settings.load_jobs_per_h / 3600.0
    users = [f"u{i}" for i in range(settings.n_users)]
    if settings.majority_share is not None and settings.n_users > 1:
        rest = (1.0 - settings.majority_share) / (settings.n_users - 1)
        user_p = np.array([settings.majority_share] + [rest] * (settings.n_users - 1))
    else:
        user_p = np.full(settings.n_users, 1.0 / settings.n_users)
    user_cdf = np.cumsum(user_p)
    lo, hi = math.log(settings.runtime_min_s), math.log(settings.runtime_max_s)
    t, n = 0.0, 0
    ref_rate: dict[JobTemplate, float] = {}
    while max_jobs is None or n < max_jobs:
        t += float(rng.exponential(1.0 / rate_per_s))
        if horizon_s is not None and t >= horizon_s:
            return
        tpl = settings.templates[int(rng.integers(len(settings.templates)))]
        user = users[min(int(np.searchsorted(user_cdf, rng.random(), side="right")), len(users) - 1)]
        k = tpl.gpu_options[int(rng.integers(len(tpl.gpu_options)))]
        b = tpl.batch_options[int(rng.integers(len(tpl.batch_options)))]
        ref_runtime_s = math.exp(float(rng.uniform(lo, hi)))
        urgent = bool(rng.random() < settings.urgent_fraction)
        gpu_options = (k, *(x for x in tpl.gpu_options if x != k))
        batch_options = (b, *(x for x in tpl.batch_options if x != b))
        ref_sps = ref_rate.get(tpl)
        if ref_sps is None:
            probe = JobSpec(
                job_id="probe",
                user="",
                submit_s=0.0,
                model=tpl.model,
                total_steps=1,
                batch_options=tpl.batch_options,
                gpu_options=tpl.gpu_options,
                precision=tpl.precision,
                seq_len=tpl.seq_len,
                image_size=tpl.image_size,
            )
            ref_sps = ref_rate[tpl] = truth.rate(
                probe, settings.reference_gpus, max(tpl.batch_options), settings.reference_gpu, None
            )[0]
        spec = JobSpec(
            job_id=f"j{n:06d}",
            user=user,
            submit_s=t,
            model=tpl.model,
            total_steps=max(1, math.ceil(ref_runtime_s * ref_sps / b)),
            batch_options=batch_options,
            gpu_options=gpu_options,
            malleable=settings.malleable,
            precision=tpl.precision,
            seq_len=tpl.seq_len,
            image_size=tpl.image_size,
            shareable=tpl.shareable,
        )
        if urgent:
            fastest_s = truth.fastest_runtime_s(spec, max_gpus_per_type, nodes_per_type)
            spec = dataclasses.replace(spec, urgent=True, deadline_s=t + settings.deadline_factor * fastest_s)
        n += 1
        yield spec
