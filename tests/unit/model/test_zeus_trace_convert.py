"""scripts/convert-zeus-power-traces --trace converts a whole (held-out) Zeus trace file for measuring only:
the zoo's networks kept at the precision named, the others skipped, and never into the fitted public files."""

import subprocess
import sys
from pathlib import Path

from easlurm.model.fit.dataset import read_measurements

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "convert-zeus-power-traces"
#: a made-up trace in the trace README's columns (not Zeus' figures): two converted networks, one skipped
TRACE = """dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power
cifar100,shufflenetv2,1024,adadelta,100,20.0,110.0
cifar100,shufflenetv2,1024,adam,125,15.0,120.0
imagenet,resnet50,64,adadelta,300,4000.0,240.0
librispeech,deepspeech2,32,adamw,100,9000.0,100.0
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_a_whole_trace_keeps_the_zoo_networks_at_the_named_precision(tmp_path: Path) -> None:
    trace = tmp_path / "summary_power_x.csv"
    trace.write_text(TRACE)
    out = tmp_path / "held.csv"
    done = _run("--trace", f"{trace}=a40:tf32", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = read_measurements(out)
    assert [(m.model, m.gpu, m.precision, m.power_limit_w) for m in rows] == [
        ("shufflenet-v2-cifar", "a40", "tf32", 100.0),
        ("shufflenet-v2-cifar", "a40", "tf32", 125.0),
        ("resnet50", "a40", "tf32", 300.0),
    ]
    # steps per epoch: ceil(50,000 / 1024) = 49 and ceil(1,281,167 / 64) = 20,019
    assert rows[0].step_time_s == float(f"{20.0 / 49:.6g}")
    assert rows[2].step_time_s == float(f"{4000.0 / 20019:.6g}")
    assert all(m.input == "real" and m.optimizer == "adam" for m in rows)
    assert "HELD OUT" in out.read_text().splitlines()[0]


def test_held_out_rows_are_refused_under_the_public_data_and_bad_arguments_name_the_option(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "summary_power_x.csv"
    trace.write_text(TRACE)
    target = ROOT / "data" / "oracle" / "public" / "held.csv"
    done = _run("--trace", f"{trace}=v100-pcie", "-o", str(target))
    assert done.returncode == 2 and done.stderr.startswith("--out:")
    assert not target.exists()
    done = _run("--trace", str(trace), "-o", str(tmp_path / "x.csv"))
    assert done.returncode == 2 and done.stderr.startswith("--trace:")
