"""`easlurm model measure --gpus N`: data-parallel training steps (torch DistributedDataParallel), one
process per GPU, each configuration timed with gradient synchronisation and again without it (`no_sync`),
so that the difference is the communication the interconnect leaves exposed.

The method is the one-GPU method on every rank: the same warm-up and window (the ranks agree on the step
counts, since their collectives must pair up); the step time is the slowest rank's, the power the sum of
every rank's GPU energy over its window.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from easlurm.errors import ConfigError, ModelError
from easlurm.measure.rendezvous import free_port
from easlurm.measure.steps import (
    MeasureConfig,
    Result,
    Run,
    Timing,
    exposed_comm_s,
    first_window_steps,
    import_torch,
    nvml_energy_reader,
    prepare,
    time_window,
)

log = logging.getLogger(__name__)

#: How long a rank waits for the others at the rendezvous and in a collective before giving up.
COLLECTIVE_TIMEOUT = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class Rank:
    """One process of a data-parallel run: its global rank, the world size and its GPU on its node."""

    rank: int
    world: int
    local_rank: int


@dataclass(frozen=True)
class RankWindows:
    """What one rank measured in one sweep: step times with and without gradient synchronisation."""

    sync_step_s: float
    local_step_s: float
    power_w: float | None
    peak_mem_gib: float | None
    n_params: int
    steps: int


def combine(ranks: Sequence[RankWindows]) -> Run:
    """One run of all ranks: the slowest rank's step time (the step ends when the last rank's does), the
    exposed communication from the slowest ranks with and without synchronisation, the power of all GPUs
    (None when a rank had no energy counter), the largest peak memory."""
    if not ranks:
        raise ValueError("no ranks")
    sync_s = max(r.sync_step_s for r in ranks)
    local_s = max(r.local_step_s for r in ranks)
    powers = [r.power_w for r in ranks]
    peaks = [r.peak_mem_gib for r in ranks if r.peak_mem_gib is not None]
    return Run(
        step_time_s=sync_s,
        avg_power_w=None if any(p is None for p in powers) else sum(p for p in powers if p is not None),
        peak_mem_gib=max(peaks) if peaks else None,
        n_params=ranks[0].n_params,
        steps=ranks[0].steps,
        comm_exposed_s=exposed_comm_s(sync_s, local_s),
    )


def rank_device(device: str, local_rank: int) -> str:
    """The torch device of a rank: its node's GPU `local_rank` with `cuda`, else the CPU."""
    return f"cuda:{local_rank}" if device.startswith("cuda") else "cpu"


def check_device(device: str, n_gpus: int, cuda_devices: int) -> None:
    """--device with --gpus: 'cuda' (ranks on cuda:0..N-1) or 'cpu'; enough CUDA devices for N ranks."""
    if device not in ("cuda", "cpu"):
        raise ConfigError(
            f"--device: with --gpus the ranks use cuda:0..N-1 or the CPU: give cuda or cpu, got {device!r}"
        )
    if device == "cuda" and n_gpus > cuda_devices:
        raise ConfigError(
            f"--gpus: {n_gpus} ranks need {n_gpus} CUDA devices, this machine has {cuda_devices}"
        )


def run_rank(
    me: Rank,
    cfg: MeasureConfig,
    device: str,
    timing: Timing,
    sweeps: int,
    energy: bool = True,
) -> list[Run] | None:
    """Join the process group (MASTER_ADDR/MASTER_PORT in the environment), time `cfg` once per sweep, and
    return the combined runs on rank 0 (None on the other ranks). NCCL on CUDA, gloo on the CPU."""
    torch = import_torch()
    dist = torch.distributed
    dev_name = rank_device(device, me.local_rank)
    dev = torch.device(dev_name)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group(
        "nccl" if cuda else "gloo", rank=me.rank, world_size=me.world, timeout=COLLECTIVE_TIMEOUT
    )
    read, close = nvml_energy_reader(me.local_rank) if cuda and energy else (None, lambda: None)
    try:

        def agree_max(value: float) -> float:
            t = torch.tensor([float(value)], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())

        def wrap(model: Any) -> Any:
            ddp = torch.nn.parallel.DistributedDataParallel
            return ddp(model, device_ids=[dev.index] if cuda else None)

        share = replace(cfg, batch=cfg.batch // me.world)
        runs: list[Run] = []
        for _ in range(sweeps):
            p = prepare(share, dev_name, timing, wrap, agree_max)
            assert p.step_local is not None
            steps = int(agree_max(first_window_steps(p, timing)))
            synced = time_window(p.step, p.sync, steps, timing, read, agree_max, dist.barrier)
            for _ in range(timing.min_warmup_steps):  # the no_sync path's first steps out of the window
                p.step_local()
            local = time_window(p.step_local, p.sync, synced.steps, timing, None, agree_max, dist.barrier)
            mine = RankWindows(
                synced.step_time_s,
                local.step_time_s,
                synced.avg_power_w,
                p.peak_mem_gib(),
                p.n_params,
                synced.steps,
            )
            every: list[Any] = [None] * me.world
            dist.all_gather_object(every, mine)
            runs.append(combine(every))
            del p
            if cuda:
                torch.cuda.empty_cache()
        # rank 0 hosts the rendezvous store: leaving before the others have left aborts them
        dist.barrier()
        return runs if me.rank == 0 else None
    finally:
        close()
        dist.destroy_process_group()


def slurm_rank(env: Mapping[str, str], n_gpus: int) -> Rank:
    """This srun task's rank (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); the step must have one task per GPU."""
    try:
        me = Rank(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env["SLURM_LOCALID"]))
    except (KeyError, ValueError):
        raise ConfigError("--ddp-task: run by srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID)") from None
    if me.world != n_gpus:
        raise ConfigError(f"--gpus {n_gpus}: the srun step has {me.world} tasks (one per GPU expected)")
    return me


def _local_rank_main(
    local_rank: int,
    cfg: MeasureConfig,
    device: str,
    timing: Timing,
    sweeps: int,
    threads: int,
    port: int,
    out: str,
) -> None:
    """One spawned rank on this machine (top level: torch.multiprocessing pickles it by name)."""
    torch = import_torch()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(threads)
    runs = run_rank(Rank(local_rank, cfg.n_gpus, local_rank), cfg, device, timing, sweeps)
    if runs is not None:
        Path(out).write_text(json.dumps([asdict(r) for r in runs]))


def measure_local(
    configs: Sequence[MeasureConfig],
    gpu: str,
    device: str,
    *,
    sweeps: int,
    timing: Timing,
    cpu_threads: int | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Every configuration on `n_gpus` local processes (spawned for it, all its sweeps in them); a
    configuration whose ranks fail (out of memory, a shape the model cannot take) is reported and left out."""
    mp = import_torch().multiprocessing
    results: list[Result] = []
    for c in configs:
        threads = cpu_threads or max(1, len(os.sched_getaffinity(0)) // c.n_gpus)
        with tempfile.TemporaryDirectory(prefix="easlurm-ddp-") as tmp:
            out = Path(tmp) / "runs.json"
            try:
                mp.start_processes(
                    _local_rank_main,
                    args=(c, device, timing, sweeps, threads, free_port("127.0.0.1"), str(out)),
                    nprocs=c.n_gpus,
                    join=True,
                    start_method="spawn",
                )
            except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
                lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
                log.warning(
                    "left out: %s batch %d on %d GPUs: %s",
                    c.model,
                    c.batch,
                    c.n_gpus,
                    lines[-1] if lines else exc,
                )
                continue
            runs = tuple(Run(**r) for r in json.loads(out.read_text()))
        results.append(Result(c, runs, gpu))
        if on_result:
            on_result(results[-1])
    if not results:
        raise ModelError(f"no configuration could be measured ({len(configs)} failed; see the warnings)")
    return results
