"""The local cluster's shard configuration: generated slurm.conf/gres.conf, and bad counts in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.errors import ConfigError
from easlurm.slurm.box import SlurmBox
from easlurm.slurm.box_cli import make_box


def test_shards_are_offered_per_gpu_beside_whole_gpus(tmp_path: Path) -> None:
    box = SlurmBox(tmp_path, shards_per_gpu=3)
    conf = box._slurm_conf()
    assert "GresTypes=gpu,shard" in conf
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:h100,gres/shard" in conf
    assert "NodeName=h100-2 " in conf and "Gres=gpu:h100:8,shard:24 " in conf
    assert "NodeName=cpu-1 " in conf and "shard" not in conf.split("NodeName=cpu-1 ")[1].splitlines()[0]
    gres = box._gres_conf().splitlines()
    shard_lines = [ln for ln in gres if ln.startswith("NodeName=h100-2 Name=shard")]
    assert len(shard_lines) == 8  # one per GPU, tied to its device file
    assert shard_lines[3].endswith(f"Count=3 File={tmp_path}/dev/h100-2/nvidia3")


def test_zero_gives_whole_gpus_only(tmp_path: Path) -> None:
    box = SlurmBox(tmp_path / "box", shards_per_gpu=0)
    assert "GresTypes=gpu\n" in box._slurm_conf() and "shard" not in box._slurm_conf()
    assert "shard" not in box._gres_conf()


@pytest.mark.parametrize("value", [1, -2, 65, 2.5, "3", True])
def test_bad_shard_counts_are_one_line_naming_the_setting(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        SlurmBox(tmp_path, shards_per_gpu=value)  # type: ignore[arg-type]
    assert "box.shards_per_gpu" in str(info.value) and "\n" not in str(info.value)


def test_bad_shard_count_from_a_file_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "easlurm.yaml"
    conf.write_text("box:\n  shards_per_gpu: 1\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "easlurm").mkdir(parents=True)
    (tmp_path / "xdg" / "easlurm" / "config.yaml").write_text(conf.read_text())
    with pytest.raises(ConfigError, match=r"config\.yaml: box\.shards_per_gpu: shards per GPU must be 0"):
        make_box()
