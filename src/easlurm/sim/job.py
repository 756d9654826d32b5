"""A submitted training job: its template, amount of work, malleable options and service level."""

from __future__ import annotations

from dataclasses import dataclass

from easlurm.errors import ConfigError


@dataclass(frozen=True)
class JobSpec:
    """One job as submitted. The first GPU/batch option is the one the user asked for (what a rigid
    scheduler or a non-malleable job uses); `total_steps` counts steps at that batch, so the work in
    samples is fixed and another batch covers it in fewer or more steps."""

    job_id: str
    user: str
    submit_s: float
    model: str
    total_steps: int
    batch_options: tuple[int, ...]
    gpu_options: tuple[int, ...]
    gpu_types: tuple[str, ...] | None = None
    malleable: bool = True
    urgent: bool = False
    deadline_s: float | None = None
    precision: str = "bf16"
    seq_len: int | None = None
    image_size: int | None = None
    partition: str | None = None
    recorded_start_s: float | None = None
    recorded_end_s: float | None = None
    power_limit_options_w: tuple[float, ...] = ()
    shareable: bool = False

    def __post_init__(self) -> None:
        if self.total_steps <= 0:
            raise ConfigError(f"job {self.job_id}: total_steps must be > 0, got {self.total_steps}")
        if not self.batch_options or not self.gpu_options:
            raise ConfigError(f"job {self.job_id}: batch_options and gpu_options must not be empty")
        if any(k <= 0 for k in self.gpu_options) or any(b <= 0 for b in self.batch_options):
            raise ConfigError(f"job {self.job_id}: GPU counts and batches must be > 0")
        if not isinstance(self.shareable, bool):
            raise ConfigError(f"job {self.job_id}: share must be true or false, got {self.shareable!r}")

    @property
    def total_samples(self) -> float:
        return float(self.total_steps) * self.batch_options[0]
