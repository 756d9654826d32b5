"""Public measurement CSVs under data/oracle/public: each is what its converter makes of the committed raw
source, every row reads as a measurement and every GPU is in the shipped catalogue."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from easlurm.model.fit.dataset import read_measurements
from easlurm.model.hardware import load_catalogue

ROOT = Path(__file__).resolve().parents[3]
PUBLIC = ROOT / "data" / "oracle" / "public"
#: converter script -> (raw folder, committed CSV)
CONVERTERS = {
    "convert-lambda-benchmarks": ("lambda", "lambda_pytorch.csv"),
    "convert-zeus-power-traces": ("zeus", "zeus_power_limits.csv"),
    "convert-dle-tables": ("dle", "dle_training.csv"),
    "convert-gavel-throughputs": ("gavel", "gavel_cifar.csv"),
}
#: converters of tables that are not measurements: script -> (raw folder, committed CSV)
TABLE_CONVERTERS = {"convert-nvidia-smi-idle": ("nvidia_smi", "nvidia_smi_idle.csv")}
#: GPUs the idle-power table collects beside the catalogue's
IDLE_EXTRAS = {"a40"}
#: traces the project holds out from fitting and evaluation: never converted or committed here
HELD_OUT = ("summary_power_v100", "summary_power_a40", "pollux", "osdi21")


@pytest.mark.parametrize("script", sorted({**CONVERTERS, **TABLE_CONVERTERS}))
def test_converter_reproduces_the_committed_csv(script: str, tmp_path: Path) -> None:
    raw, csv_name = {**CONVERTERS, **TABLE_CONVERTERS}[script]
    out = tmp_path / csv_name
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), str(PUBLIC / "raw" / raw), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.read_text() == (PUBLIC / csv_name).read_text()


@pytest.mark.parametrize("csv_name", sorted(name for _, name in CONVERTERS.values()))
def test_every_row_reads_and_every_gpu_is_in_the_catalogue(csv_name: str) -> None:
    rows = read_measurements(PUBLIC / csv_name)
    catalogue = load_catalogue()
    assert {catalogue.resolve(m.gpu) for m in rows} == {m.gpu for m in rows}
    assert all(m.step_time_s > 0 and m.batch >= m.n_gpus and m.n_nodes == 1 for m in rows)  # one machine each
    assert all((PUBLIC / "raw" / raw / "PROVENANCE.md").is_file() for raw, _ in CONVERTERS.values())


def test_lambda_batches_are_global_and_fp32_is_tf32_from_ampere_on() -> None:
    rows = read_measurements(PUBLIC / "lambda_pytorch.csv")
    catalogue = load_catalogue()
    rn50 = {(m.gpu, m.n_gpus, m.precision): m for m in rows if m.model == "resnet50"}
    assert rn50[("a100-80gb", 8, "tf32")].batch == 8 * rn50[("a100-80gb", 1, "tf32")].batch == 5120
    assert rn50[("h100-sxm", 1, "amp-fp16")].batch == 1280  # the 80 GB template, as the H100 PCIe row
    for m in rows:
        arch = catalogue.get(m.gpu).architecture
        assert m.precision in (
            ("fp32", "amp-fp16") if arch in ("pascal", "volta", "turing") else ("tf32", "amp-fp16")
        )
        assert m.avg_power_w is None  # the tables' watt column is nominal power, not a measurement


def test_zeus_rows_carry_limit_and_power_and_no_held_out_trace_is_here() -> None:
    rows = read_measurements(PUBLIC / "zeus_power_limits.csv")
    assert {m.gpu for m in rows} == {"p100", "rtx6000"}
    assert all(m.power_limit_w is not None and m.avg_power_w is not None for m in rows)
    catalogue = load_catalogue()
    for m in rows:
        spec = catalogue.get(m.gpu)
        assert spec.min_power_limit_w <= m.power_limit_w <= spec.tdp_w  # type: ignore[operator]
        assert m.avg_power_w <= m.power_limit_w * 1.02  # type: ignore[operator]
    rn50 = {m.power_limit_w: m.step_time_s for m in rows if m.gpu == "rtx6000" and m.model == "resnet50"}
    assert rn50[100.0] > rn50[260.0]  # a lower cap slows the step
    names = [p.name.lower() for p in (ROOT / "data").rglob("*")]
    assert not [n for n in names if any(h in n for h in HELD_OUT)]


def test_same_work_costs_about_the_same_dynamic_energy_on_the_p100_and_the_rtx6000() -> None:
    """The figures docs/oracle-gpus.md gives for energy per FLOP on the CUDA cores: at the top limit, the energy
    above P0 idle of one step of the same job on both Zeus machines, their speed ratio and the P100's draw."""
    rows = read_measurements(PUBLIC / "zeus_power_limits.csv")
    catalogue = load_catalogue()
    top = {"p100": 250.0, "rtx6000": 260.0}

    def at_top(gpu: str, model: str, batch: int) -> tuple[float, float]:
        (m,) = [
            r for r in rows if (r.gpu, r.model, r.batch, r.power_limit_w) == (gpu, model, batch, top[gpu])
        ]
        assert m.avg_power_w is not None
        return (m.avg_power_w - catalogue.get(gpu).p0_w) * m.step_time_s, m.step_time_s

    (p100_rn, t_p100_rn), (rtx_rn, t_rtx_rn) = (
        at_top("p100", "resnet50", 128),
        at_top("rtx6000", "resnet50", 128),
    )
    assert (round(p100_rn), round(rtx_rn)) == (86, 87)
    (p100_sn, t_p100_sn), (rtx_sn, t_rtx_sn) = (
        at_top("p100", "shufflenet-v2-cifar", 1024),
        at_top("rtx6000", "shufflenet-v2-cifar", 1024),
    )
    assert (round(p100_sn), round(rtx_sn)) == (37, 32)
    assert (round(t_p100_rn / t_rtx_rn, 2), round(t_p100_sn / t_rtx_sn, 2)) == (1.25, 1.74)
    p100 = [
        r.avg_power_w for r in rows if r.gpu == "p100" and r.model == "resnet50" and r.power_limit_w >= 200
    ]  # type: ignore[operator]
    rtx = [
        r.avg_power_w for r in rows if r.gpu == "rtx6000" and r.model == "resnet50" and r.power_limit_w == 260
    ]
    assert (round(min(p100)), round(max(p100))) == (152, 167)  # type: ignore[type-var]
    assert (round(min(rtx)), round(max(rtx))) == (230, 237)  # type: ignore[type-var]


def test_dle_rows_complement_the_published_resnet_file_and_skip_out_of_memory_cells() -> None:
    rows = read_measurements(PUBLIC / "dle_training.csv")
    published = read_measurements(ROOT / "data" / "oracle" / "published_resnet50_dle.csv")
    key = [(m.model, m.gpu, m.n_gpus, m.precision, m.batch) for m in rows]
    assert not set(key) & {(m.model, m.gpu, m.n_gpus, m.precision, m.batch) for m in published}
    assert len(key) == len(set(key))
    bert = [m for m in rows if m.model == "bert-large"]
    assert {m.gpu for m in bert} == {"v100-16gb", "v100", "v100-sxm3"} and {m.seq_len for m in bert} == {384}
    assert not [m for m in bert if m.precision == "fp32" and m.batch == 10 * m.n_gpus]  # N/A: out of memory


def test_readme_counts_rows_per_gpu_and_model() -> None:
    """The row counts quoted in data/README.md are those of the committed CSVs."""
    files = ["lambda_pytorch.csv", "dle_training.csv", "zeus_power_limits.csv"]
    rows = {f: read_measurements(PUBLIC / f) for f in files}
    catalogue = load_catalogue()
    readme = (ROOT / "data" / "README.md").read_text()
    lines = []
    for gpu in {m.gpu for r in rows.values() for m in r}:
        counts = [sum(m.gpu == gpu for m in rows[f]) for f in files]
        cells = [gpu, catalogue.get(gpu).architecture, *map(str, counts), str(sum(counts))]
        lines.append("| " + " | ".join(cells) + " |")
    for model in {m.model for r in rows.values() for m in r}:
        counts = [sum(m.model == model for m in rows[f]) for f in files]
        lines.append("| " + " | ".join([model, *map(str, counts), str(sum(counts))]) + " |")
    totals = [len(rows[f]) for f in files]
    lines.append("| " + " | ".join(["all", *map(str, totals), str(sum(totals))]) + " |")
    assert [line for line in lines if line not in readme] == []


def _idle_rows() -> list[dict[str, str]]:
    with (PUBLIC / "nvidia_smi_idle.csv").open(newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def test_idle_readings_are_clocked_up_at_zero_utilisation_on_known_gpus() -> None:
    """Every row is P0 or P2 at 0 % GPU-Util, of a catalogue GPU or one of the two marked extras, one per file."""
    rows = _idle_rows()
    catalogue = load_catalogue()
    assert rows and all(r["perf_state"] in ("P0", "P2") and r["util_pct"] == "0" for r in rows)
    assert {r["gpu"] for r in rows} - IDLE_EXTRAS <= set(catalogue.keys())
    assert {r["gpu"] for r in rows} >= IDLE_EXTRAS | {"h100-sxm", "a100-40gb", "p100", "rtx6000"}
    assert len({r["source"] for r in rows}) == len(rows)
    assert [(r["gpu"], int(r["source"].split()[1])) for r in rows] == sorted(
        (r["gpu"], int(r["source"].split()[1])) for r in rows
    )
    for r in rows:
        assert 0 < int(r["power_w"]) <= int(r["power_cap_w"])
        assert 0 <= int(r["memory_used_mib"]) < int(r["memory_total_mib"])
    assert (PUBLIC / "raw" / "nvidia_smi" / "PROVENANCE.md").is_file()
    gpus = {r["gpu"] for r in rows}
    readme = (ROOT / "data" / "README.md").read_text()
    assert f"{len(rows)} nvidia-smi readings of {len(gpus)} GPU types" in readme
    assert "rtx3080" not in gpus  # the README names it as the catalogue GPU without a reading


def test_idle_v100_sxm2_rows_split_by_memory_total() -> None:
    """nvidia-smi prints both V100-SXM2 sizes as "Tesla V100-SXM2...": the memory total picks the key."""
    sxm2 = [r for r in _idle_rows() if r["nvidia_smi_name"] == "Tesla V100-SXM2..."]
    assert {r["gpu"] for r in sxm2} == {"v100", "v100-16gb"}
    assert all((int(r["memory_total_mib"]) < 20_000) == (r["gpu"] == "v100-16gb") for r in sxm2)


def test_idle_converter_rejects_a_busy_reading(tmp_path: Path) -> None:
    """A reading at P8 or with a kernel running is not clocked-up idle: exit 2 naming the line, no CSV."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "readings.txt").write_text(
        '# file 1 (find_string "Tesla T4")\n'
        "|   0  Tesla T4            Off  | 00000000:00:04.0 Off |                    0 |\n"
        "| N/A   42C    P0    26W /  70W |    100MiB / 15360MiB |     40%      Default |\n"
    )
    out = tmp_path / "idle.csv"
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "convert-nvidia-smi-idle"), str(raw), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "readings.txt:3" in res.stderr and "40 %" in res.stderr
    assert not out.exists()


def test_catalogue_p0_idle_power_is_the_median_of_each_gpus_readings() -> None:
    """The oracle's waiting power comes from this table: each catalogue GPU with readings lists their median
    (rounded to the watt), and a GPU without readings is estimated with the median share of the others."""
    import statistics

    from easlurm.model.hardware import P0_SHARE_ESTIMATE

    cat = load_catalogue()
    by_gpu: dict[str, list[float]] = {}
    for row in _idle_rows():
        by_gpu.setdefault(row["gpu"], []).append(float(row["power_w"]))
    shares = []
    for key in cat:
        spec = cat.get(key)
        readings = by_gpu.get(key)
        if readings is None:
            assert spec.p0_idle_w is None, key
            continue
        assert spec.p0_idle_w == round(statistics.median(readings)), key
        assert "nvidia_smi_idle.csv" in spec.sources["p0_idle_w"], key
        shares.append((spec.p0_w - spec.idle_w) / (spec.tdp_w - spec.idle_w))
    assert len(shares) >= 20
    assert pytest.approx(statistics.median(shares), abs=0.005) == P0_SHARE_ESTIMATE
