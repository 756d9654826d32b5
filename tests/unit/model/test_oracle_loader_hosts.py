"""A data loader's floor belongs to its host (`easlurm model calibrate --hosts`, docs/oracle-gpus.md): a row that
names a host is predicted with that host's floor, a row that names none with the typical host's, the
geometric mean of the hosts the shipped parameters know."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from easlurm.cli import main
from easlurm.errors import ModelError, TraceError
from easlurm.model.fit.calibrate import score
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements, write_measurements
from easlurm.model.fit.hosts import fit_hosts, host_rows, without_hosts
from easlurm.model.fit.site import LOADER_PARAM
from easlurm.model.hardware import load_catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams, load_params

ROOT = Path(__file__).resolve().parents[3]
PUBLIC = [ROOT / "data/oracle/public/zeus_power_limits.csv", ROOT / "data/oracle/public/gavel_cifar.csv"]
ZEUS, GAVEL = "zeus-nsdi23-p100-rtx6000", "gavel-osdi20"


def _rows() -> list[Measurement]:
    return [m for path in PUBLIC for m in read_measurements(path)]


def _step(params: OracleParams, host: str, batch: int = 8) -> float:
    """A small CIFAR ShuffleNet step with a real loader on a P100: the loader's floor sets it."""
    m = Measurement(
        "shufflenet-v2-cifar", batch, "fp32", 1, "p100", 1.0, image_size=32, input="real", host=host
    )
    pred = Oracle(params, load_catalogue(), cache_size=0).predict_rows([m.workload()], placements_of([m]))
    return float(pred.step_time_s[0])


def test_the_shipped_floor_is_the_hosts_geometric_mean():
    """The public files name two hosts; the global floor is the geometric mean of their floors, and each
    host's floor is far from it (Zeus' machine about 64 ms, Gavel's about 27 ms)."""
    p = load_params()
    factors = p.host_factors()
    assert set(factors) == {ZEUS, GAVEL}
    floors = {h: p[LOADER_PARAM] * f for h, f in factors.items()}
    assert math.exp(np.mean(np.log(list(floors.values())))) == pytest.approx(p[LOADER_PARAM], rel=1e-5)
    assert floors[ZEUS] > 2.0 * floors[GAVEL]
    assert {m.host for m in _rows()} == {ZEUS, GAVEL}


def test_a_row_of_a_named_host_waits_for_that_hosts_loader():
    """The same loader-bound step: the Zeus host's floor, Gavel's, and the typical one for a host the
    parameters do not name or no host at all."""
    p = load_params()
    zeus, gavel, unknown, none = (_step(p, h) for h in (ZEUS, GAVEL, "another-site", ""))
    assert zeus > unknown > gavel
    assert unknown == none
    floors = {h: p[LOADER_PARAM] * f for h, f in p.host_factors().items()}
    assert zeus == pytest.approx(floors[ZEUS], rel=0.10)
    assert gavel == pytest.approx(floors[GAVEL], rel=0.15)
    assert unknown == pytest.approx(p[LOADER_PARAM], rel=0.15)
    # without the hosts' factors every row waits for the same floor
    plain = without_hosts(p)
    assert _step(plain, ZEUS) == _step(plain, GAVEL) == _step(plain, "")


def test_calibration_predicts_rows_with_their_hosts_floor():
    """The calibration's array pass (score) applies the host factors as the oracle does: same errors."""
    rows, p = _rows(), load_params()
    pred = Oracle(p, load_catalogue(), cache_size=0).predict_rows(
        [m.workload() for m in rows], placements_of(rows)
    )
    measured = np.array([m.step_time_s for m in rows])
    oracle_mape = float(np.mean(np.abs(pred.step_time_s - measured) / measured) * 100.0)
    assert score(p, rows).mape_time == pytest.approx(oracle_mape, rel=1e-9)
    assert score(without_hosts(p), rows).mape_time > oracle_mape + 5.0  # Gavel's rows at the typical floor


def test_fitting_the_public_hosts_again_gives_the_shipped_floors():
    """`calibrate --hosts` on the two public files from the shipped parameters finds the floors they carry
    (the shipped file was written by that command), and each host's rows are predicted better with its own
    floor than with the typical one."""
    p = load_params()
    fit = fit_hosts(_rows(), p, load_catalogue())
    assert fit.typical_s == pytest.approx(p[LOADER_PARAM], rel=0.01)
    for h in fit.hosts:
        assert h.floor_s == pytest.approx(p[LOADER_PARAM] * p.host_factor(h.host), rel=0.01)
        assert h.bound_rows >= 3
    by = {h.host: h for h in fit.hosts}
    typical = without_hosts(p)
    for host, rows in host_rows(_rows()).items():
        assert by[host].mape_after_pct < score(typical, rows).mape_time


def test_fit_hosts_needs_rows_that_name_a_host():
    rows = [dataclasses.replace(m, host="") for m in read_measurements(PUBLIC[1])]
    with pytest.raises(ModelError, match="host"):
        fit_hosts(rows, load_params(), load_catalogue())


def test_host_column_round_trips_and_rejects_bad_names(tmp_path):
    rows = read_measurements(PUBLIC[1])
    out = tmp_path / "rows.csv"
    write_measurements(rows, out)
    assert [m.host for m in read_measurements(out)] == [GAVEL] * len(rows)
    text = out.read_text().replace(GAVEL, "bad host", 1)
    out.write_text(text)
    with pytest.raises(TraceError, match=r"rows.csv:2: host must be"):
        read_measurements(out)


def test_a_bad_host_factor_is_refused_and_old_files_load():
    with pytest.raises(ModelError, match="bad host factor"):
        OracleParams(scalars={"host:zeus.beta_gemm": 1.2})
    with pytest.raises(ModelError, match="bad host factor"):
        OracleParams(scalars={"host:.t_input_step_s": 1.2})
    old = load_params(ROOT / "tests/fixtures/params/2026-11-24.4-energy-per-flop.yaml")
    assert old.host_factors() == {}
    assert _step(old, ZEUS) == _step(old, "")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--site"], "--site: --hosts"),
        (["--free", "c_mem"], "--free: --hosts"),
        (["--scaling"], "--scaling: --hosts"),
    ],
)
def test_cli_refuses_hosts_with_other_fits(tmp_path, capsys, extra, message):
    argv = ["model", "calibrate", "--hosts", str(PUBLIC[1]), "-O", str(tmp_path / "p.yaml"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "p.yaml").exists()


def test_cli_writes_and_reports_the_floors(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    argv = ["model", "calibrate", "--hosts", *map(str, PUBLIC), "-O", str(out), "--version", "test-hosts"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    written = load_params(out)
    assert written.version == "test-hosts"
    record = written.meta["loader_hosts"]
    assert set(record["hosts"]) == {ZEUS, GAVEL}
    for host, rec in record["hosts"].items():
        line = next(x for x in text.splitlines() if x.strip().startswith(host))
        assert f"{1e3 * rec['t_input_step_s']:.1f} ms" in line
    assert f"{1e3 * record['typical_t_input_step_s']:.1f} ms, the geometric mean of 2 hosts' floors" in text
