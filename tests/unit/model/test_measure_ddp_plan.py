"""`easlurm model measure --gpus/--nodes` without torch: the exposed-communication arithmetic, how ranks'
windows combine, the configurations and their checks, the multi-node job script, the rendezvous address,
the comm_exposed_s column and the --dry-run scripts."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError, TraceError
from easlurm.measure.ddp import RankWindows, check_device, combine, slurm_rank
from easlurm.measure.rendezvous import job_master, master_addr
from easlurm.measure.slurm_array import array_script, groups, read_task_csv, task_gpu_power_w
from easlurm.measure.steps import MeasureConfig, Result, Run, Timing, configurations, exposed_comm_s
from easlurm.model.fit.dataset import Measurement, read_measurements, write_measurements


def test_exposed_communication_is_the_synchronised_step_minus_the_local_one_floored_at_zero() -> None:
    assert exposed_comm_s(0.050, 0.040) == pytest.approx(0.010)
    assert exposed_comm_s(0.040, 0.041) == 0.0  # noise: the local step read slower


def test_ranks_combine_into_the_slowest_step_and_the_power_of_all_gpus() -> None:
    """The step ends when the slowest rank's does; the power is every GPU's; a rank without an energy
    counter leaves the power unknown rather than counting as 0 W."""
    a = RankWindows(0.050, 0.030, 400.0, 10.0, 1000, 80)
    b = RankWindows(0.052, 0.034, 410.0, 11.0, 1000, 80)
    run = combine([a, b])
    assert run.step_time_s == 0.052 and run.avg_power_w == 810.0 and run.peak_mem_gib == 11.0
    assert run.comm_exposed_s == pytest.approx(0.018)
    assert combine([a, RankWindows(0.05, 0.03, None, None, 1000, 80)]).avg_power_w is None


def test_configurations_carry_the_gpu_count_and_refuse_uneven_splits() -> None:
    cfgs = configurations(["shufflenet"], [4, 8], ["fp32"], gpus=[1, 2], nodes=1)
    assert [(c.n_gpus, c.batch) for c in cfgs] == [(1, 4), (1, 8), (2, 4), (2, 8)]
    with pytest.raises(ConfigError, match="--batch: 6 does not split evenly over --gpus 4"):
        configurations(["shufflenet"], [6], ["fp32"], gpus=[4])
    with pytest.raises(ConfigError, match="--gpus: 3 is not a multiple of --nodes 2"):
        configurations(["shufflenet"], [6], ["fp32"], gpus=[3], nodes=2)
    with pytest.raises(ConfigError, match="--gpus: 1 is not a multiple of --nodes 2"):
        configurations(["shufflenet"], [6], ["fp32"], gpus=[1], nodes=2)


def test_device_and_srun_task_checks() -> None:
    check_device("cpu", 4, 0)
    check_device("cuda", 2, 2)
    with pytest.raises(ConfigError, match="--device"):
        check_device("cuda:1", 2, 8)
    with pytest.raises(ConfigError, match="--gpus: 4 ranks need 4 CUDA devices, this machine has 2"):
        check_device("cuda", 4, 2)
    me = slurm_rank({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}, 4)
    assert (me.rank, me.world, me.local_rank) == (3, 4, 1)
    with pytest.raises(ConfigError, match="the srun step has 2 tasks"):
        slurm_rank({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}, 4)
    with pytest.raises(ConfigError, match="--ddp-task"):
        slurm_rank({}, 4)


def test_rendezvous_is_the_first_node_or_the_address_srun_was_launched_from() -> None:
    assert job_master({"SLURM_JOB_NODELIST": "h100-[3-4]"}) == "h100-3"
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST"):
        job_master({})
    env = {"MASTER_ADDR": "h100-3", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.3"}
    assert master_addr(env, resolves=lambda h: True) == "h100-3"
    assert master_addr(env, resolves=lambda h: False) == "10.0.0.3"
    with pytest.raises(ConfigError, match="does not resolve"):
        master_addr({"MASTER_ADDR": "h100-3"}, resolves=lambda h: False)


def _stub(path: Path, body: str) -> str:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_multinode_script_runs_one_srun_task_per_gpu_meeting_on_the_first_node(tmp_path: Path) -> None:
    """Configuration 1 (4 GPUs over 2 nodes) is an array task of 2 nodes x 2 tasks; the script exports the
    rendezvous the helper prints and starts one srun step whose tasks are the ranks."""
    cfgs = configurations(["shufflenet"], [4, 8], ["fp32"], image_size=32, gpus=[2, 4], nodes=2)
    assert groups(cfgs) == {(2, 2): [0, 1], (4, 2): [2, 3]}
    python = _stub(
        tmp_path / "python",
        'if [ "$2" = easlurm.measure.rendezvous ]; then echo "h100-1 23456"; else echo "py $*"; fi\n',
    )
    text = array_script(
        cfgs,
        tmp_path,
        sweeps=1,
        timing=Timing(0.0, 0.05),
        gpu="h100-sxm",
        gres="gpu:h100:2",
        python=python,
        indices=[2, 3],
    )
    for line in (
        "#SBATCH --array=2-3",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --gres=gpu:h100:2",
    ):
        assert f"{line}\n" in text
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir / "srun", 'echo "srun $* MASTER=$MASTER_ADDR:$MASTER_PORT"\n')
    env = {"SLURM_ARRAY_TASK_ID": "3", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = subprocess.run(["bash", "-c", text], env=env, capture_output=True, text=True, check=True)
    line = res.stdout.strip()
    srun = "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --kill-on-bad-exit=1"
    assert line.startswith(f"{srun} {python} -m easlurm.cli model measure ")
    assert "--ddp-task --model shufflenet-small --batch 8" in line and "--gpus 4 --nodes 2" in line
    assert f"-O {tmp_path}/task-3.csv" in line and line.endswith("MASTER=h100-1:23456")
    with pytest.raises(ValueError, match="one array per"):
        array_script(cfgs, tmp_path, sweeps=1, timing=Timing(), gpu=None)


def test_the_srun_steps_power_is_read_for_a_parallel_task() -> None:
    from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment

    def node(i: int, gpu_j: float) -> NodeRecord:
        return NodeRecord(i, f"h100-{i + 1}", 0.0, 10.0, [DeviceRecord("gpu0", "gpu", gpu_j)])

    batch = StepRecord(7, "batch", 1, [node(0, 100.0)], spec="gpu")
    step0 = StepRecord(7, "0", 2, [node(0, 2500.0), node(1, 2600.0)], spec="gpu")
    text = encode_admin_comment([batch, step0])
    assert task_gpu_power_w(text, "0") == pytest.approx(510.0)
    assert task_gpu_power_w(text) == pytest.approx(10.0)


def test_comm_exposed_column_round_trips_and_old_files_read_without_it(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    rows = [
        Measurement(
            "resnet50", 64, "amp-bf16", 4, "h100-sxm", 0.031, avg_power_w=2000.0, comm_exposed_s=0.004
        ),
        Measurement("resnet50", 64, "amp-bf16", 2, "h100-sxm", 0.030, comm_exposed_s=0.0),
        Measurement("resnet50", 64, "amp-bf16", 1, "h100-sxm", 0.029),
    ]
    write_measurements(rows, path)
    assert read_measurements(path) == rows
    old = tmp_path / "old.csv"
    old.write_text("model,batch,precision,n_gpus,gpu,step_time_s\nresnet50,64,bf16,1,h100-sxm,0.03\n")
    assert read_measurements(old)[0].comm_exposed_s is None
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text().replace("0.004", "-0.004"))
    with pytest.raises(TraceError, match=r"bad.csv:2: comm_exposed_s must be >= 0"):
        read_measurements(bad)


def test_a_parallel_tasks_csv_keeps_its_runs_exposed_communication(tmp_path: Path) -> None:
    from easlurm.measure.steps import write_results

    cfg = MeasureConfig("shufflenet-small", 8, "fp32", image_size=32, n_gpus=4, n_nodes=2)
    runs = (Run(0.05, None, None, 1366792, 10, 0.01), Run(0.06, None, None, 1366792, 10, 0.02))
    path = tmp_path / "task-0.csv"
    write_results([Result(cfg, runs, "h100-sxm")], str(path), "test")
    (row,) = read_measurements(path)
    assert (row.n_gpus, row.n_nodes, row.comm_exposed_s) == (4, 2, pytest.approx(0.015))
    back = read_task_csv(path, cfg)
    assert [r.comm_exposed_s for r in back.runs] == [0.01, 0.02] and back.comm_exposed_s == pytest.approx(
        0.015
    )


def test_dry_run_prints_one_script_per_gpu_count_and_submits_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.csv"
    argv = ["model", "measure", "--model", "shufflenet", "--batch", "8", "--gpus", "2,4", "--nodes", "2"]
    rc = main([*argv, "--slurm", "--dry-run", "--partition", "h100", "-O", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    assert printed.count("#!/bin/bash") == 2 and "srun --nodes=2 --ntasks=4" in printed
    assert "#SBATCH --gres=gpu:1\n" in printed and "#SBATCH --gres=gpu:2\n" in printed
    assert not out.exists()
    assert main([*argv[:-2], "--dry-run"]) == 2
    assert "--dry-run: only with --slurm" in capsys.readouterr().err
    assert main([*argv, "--slurm", "--gres", "gpu:2", "--dry-run"]) == 2
    assert "--gres: one value cannot fit several --gpus counts" in capsys.readouterr().err
    assert main(["model", "measure", "--pairs", "resnet50:8+bert-base:8", "--gpus", "2"]) == 2
    assert "--gpus: not with --pairs" in capsys.readouterr().err
