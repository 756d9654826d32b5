"""What docs/oracle-comm.md quotes: the overlapped all-reduce, node spread, and published 1 -> 8 GPU speedups."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from easlurm.sim.doc_figures import DocFigures, table

DATA = "data/oracle/published_resnet50_dle.csv"
#: per-GPU batches of the exposed-communication sweep, and node counts of the spread table
BATCHES = (8, 16, 32, 64, 128)
NODES = (1, 2, 4, 8)


@dataclass(frozen=True)
class CommFigures:
    params_version: str
    #: (per-GPU batch, all-buckets ms, exposed ms, step ms) of bert-large bf16 on 16 A100s over 2 nodes
    sweep: list[tuple[int, float, float, float]]
    #: (nodes, step ms, exposed ms) of bert-large bf16, 8 A100s at 8 per GPU
    spread: list[tuple[int, float, float]]
    #: (gpu, link kind, exposed ms) of bert-large bf16 on 8 GPUs of one node at 4 per GPU
    links: list[tuple[str, str, float]]
    #: (gpu, precision, measured speedup, predicted speedup) of the published 1 -> 8 GPU rows
    speedups: list[tuple[str, str, float, float]]


def comm_source(root: Path, work_dir: Path, jobs: int) -> CommFigures:
    from easlurm.config import load_config
    from easlurm.model.build import oracle_params, params_setting
    from easlurm.model.fit.dataset import read_measurements
    from easlurm.model.fit.scaling import speedups
    from easlurm.model.oracle import Oracle, Placements
    from easlurm.model.zoo import get_workload

    params = oracle_params(params_setting(load_config()))
    oracle = Oracle(params)
    w = get_workload("bert-large", precision="bf16")
    full = Oracle(params.replace(["bwd_frac"], [0.0]))  # nothing hidden: the whole all-reduce
    pl = Placements.of(16, [16 * b for b in BATCHES], "a100-40gb", n_nodes=2)
    res, whole = oracle.predict(w, pl), full.predict(w, pl)
    sweep = [
        (b, float(a) * 1e3, float(e) * 1e3, float(t) * 1e3)
        for b, a, e, t in zip(BATCHES, whole.comm_exposed_s, res.comm_exposed_s, res.step_time_s)
    ]
    res = oracle.predict(w, Placements.of(8, 64, "a100-40gb", n_nodes=list(NODES)))
    spread = [
        (m, float(t) * 1e3, float(e) * 1e3) for m, t, e in zip(NODES, res.step_time_s, res.comm_exposed_s)
    ]
    links = []
    for gpu in ("a100-40gb", "a100-40gb-pcie"):
        res = oracle.predict(w, Placements.of(8, 32, gpu))
        links.append((gpu, oracle.catalogue.get(gpu).link_kind, float(res.comm_exposed_s[0]) * 1e3))
    rows = read_measurements(root / DATA)
    sp = [(m.gpu, m.precision, sm, sp) for m, sm, sp in speedups(rows, params)]
    return CommFigures(params.version, sweep, spread, links, sp)


def comm_figures(f: CommFigures) -> dict[str, str]:
    worst = max(abs(p / m - 1) for _, _, m, p in f.speedups) * 100
    return {
        "oracle-comm/sweep": table(
            ["per-GPU batch", "all buckets (ms)", "exposed (ms)", "step (ms)"],
            [[str(b), f"{a:.1f}", f"{e:.1f}", f"{t:.1f}"] for b, a, e, t in f.sweep],
        ),
        "oracle-comm/spread": table(
            ["nodes", "step (ms)", "exposed all-reduce (ms)"],
            [[str(m), f"{t:.1f}", f"{e:.1f}"] for m, t, e in f.spread],
        ),
        "oracle-comm/links": ", ".join(f"{g} ({k}) {e:.1f} ms" for g, k, e in f.links),
        "oracle-comm/speedups": table(
            ["GPU", "precision", "measured 1 -> 8", "predicted", "error"],
            [[g, p, f"{m:.2f}", f"{s:.2f}", f"{(s / m - 1) * 100:+.1f} %"] for g, p, m, s in f.speedups],
        )
        + f"\n\nShipped parameters `{f.params_version}`; worst speedup error {worst:.1f} %.",
    }


FIGURES = DocFigures("docs/oracle-comm.md", DATA, comm_source, comm_figures)
