"""What docs/oracle-gpus.md quotes: the oracle across GPU types (leave-one-GPU-out) and its power-limit choice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.config import load_config
from easlurm.docfigs.figures import DocFigures, table
from easlurm.model.build import oracle_params, params_setting
from easlurm.model.fit.calibrate import score
from easlurm.model.fit.dataset import read_measurements
from easlurm.model.fit.evaluate import (
    calibrating_oracle,
    evaluate_method,
    fixed_oracle,
    gpu_type,
    make_splits,
    parse_cv,
)
from easlurm.model.fit.hosts import HostFit, fit_hosts, host_rows, without_hosts
from easlurm.model.fit.limits import limit_choices, summarise_limits
from easlurm.model.hardware import load_catalogue
from easlurm.model.params import OracleParams

#: the measurements the shipped parameters are fitted to, in the order `easlurm model evaluate` reads them
DATA = (
    "data/oracle/h100_sxm_training_steps.csv",
    "data/oracle/published_resnet50_dle.csv",
    "data/oracle/public/dle_training.csv",
    "data/oracle/public/lambda_pytorch.csv",
    "data/oracle/public/zeus_power_limits.csv",
)
#: calibration settings of each leave-one-GPU-out refit (small, so that the figures regenerate in minutes)
MAXITER, POPSIZE = 20, 8
#: the public files whose rows name their host (`easlurm model calibrate --hosts` on them, "Real data loading")
HOST_DATA = ("data/oracle/public/zeus_power_limits.csv", "data/oracle/public/gavel_cifar.csv")


@dataclass(frozen=True)
class GpuEvaluation:
    """The shipped parameters on every row, and a leave-one-GPU-out evaluation (refits from the priors)."""

    params_version: str
    n_rows: int
    arch_of: dict[str, str]
    shipped: Any  # MethodReport
    logo: Any  # MethodReport
    limits: list[Any]  # LimitSummary
    hosts: HostFit  # the hosts' loader floors fitted again from the shipped parameters
    typical_mape: dict[str, float]  # each host's rows' time MAPE at the typical floor (no host factor)


def gpu_source(root: Path, work_dir: Path, jobs: int) -> GpuEvaluation:
    rows = [m for path in DATA for m in read_measurements(root / path)]
    shipped = oracle_params(params_setting(load_config()))
    cat = load_catalogue()
    arch_of = {gpu_type(m.gpu): cat.get(m.gpu).architecture for m in rows}
    as_given = evaluate_method(rows, make_splits(rows, parse_cv("none")), fixed_oracle(shipped), "oracle", "")
    scheme = parse_cv("leave-one-gpu-out")
    fit = calibrating_oracle(OracleParams(), maxiter=MAXITER, popsize=POPSIZE, seed=0)
    logo = evaluate_method(rows, make_splits(rows, scheme, 0), fit, "oracle", "", scheme.label, jobs=jobs)
    limits = summarise_limits(limit_choices(logo))
    host_data = [m for path in HOST_DATA for m in read_measurements(root / path)]
    hosts = fit_hosts(host_data, shipped, cat)
    typical = {h: score(without_hosts(shipped), r, cat).mape_time for h, r in host_rows(host_data).items()}
    return GpuEvaluation(shipped.version, len(rows), arch_of, as_given, logo, limits, hosts, typical)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} %"


def gpu_figures(ev: GpuEvaluation) -> dict[str, str]:
    archs = sorted(set(ev.arch_of.values()))
    shipped = {s.model: s for s in ev.shipped.per_gpu()}
    rows = []
    for s in ev.logo.per_gpu():
        given = shipped[s.model]
        rows.append(
            [
                s.model,
                ev.arch_of.get(s.model, ""),
                str(s.n_rows),
                _pct(s.mape_time),
                _pct(s.mape_power),
                _pct(given.mape_time),
                _pct(given.mape_power),
            ]
        )
    per_type = [s.mape_time for s in ev.logo.per_gpu() if s.mape_time is not None]
    rows.append(
        [
            "**all rows**",
            "",
            str(len(ev.logo.rows)),
            _pct(ev.logo.mape_time),
            _pct(ev.logo.mape_power),
            _pct(ev.shipped.mape_time),
            _pct(ev.shipped.mape_power),
        ]
    )
    header = ["GPU type", "architecture", "rows", "LOGO time", "LOGO power", "shipped time", "shipped power"]
    limit_rows = [
        [
            s.gpu,
            str(s.groups),
            f"{s.mean_excess_pct:.1f} %",
            f"{s.max_excess_pct:.1f} %",
            f"{s.best_chosen}/{s.groups}",
            _pct(s.mean_ratio_err_pct),
        ]
        for s in ev.limits
    ]
    unpredicted = ev.logo.n_unpredicted
    host_table = table(
        ["host", "real-input rows", "loader-bound", "floor", "time MAPE at the typical floor", "at its own"],
        [
            [
                f"`{h.host}`",
                str(h.rows),
                str(h.bound_rows),
                f"{1e3 * h.floor_s:.1f} ms",
                _pct(ev.typical_mape[h.host]),
                _pct(h.mape_after_pct),
            ]
            for h in ev.hosts.hosts
        ],
    )
    return {
        "oracle-gpus/loader-hosts": host_table
        + (
            f"\n\nAn unknown host: {1e3 * ev.hosts.typical_s:.1f} ms, the geometric mean of the "
            f"{len(ev.hosts.hosts)} hosts' floors (`easlurm model calibrate --hosts {' '.join(HOST_DATA)}` from the "
            f"shipped parameters `{ev.params_version}`)."
        ),
        "oracle-gpus/data": (
            f"{ev.n_rows} rows, {len(ev.arch_of)} GPU types, {len(archs)} architectures "
            f"({', '.join(archs)}); shipped params `{ev.params_version}`"
        ),
        "oracle-gpus/logo": table(header, rows)
        + (
            f"\n\nMean over GPU types (each type weighs the same): "
            f"{sum(per_type) / len(per_type):.1f} % time. Rows without a prediction (out of memory in the "
            f"model): {unpredicted}."
        ),
        "oracle-gpus/limits": table(
            [
                "GPU type",
                "jobs swept",
                "mean excess",
                "max excess",
                "best limit chosen",
                "energy-ratio error",
            ],
            limit_rows,
        ),
    }


FIGURES = DocFigures("docs/oracle-gpus.md", ", ".join(DATA), gpu_source, gpu_figures)
