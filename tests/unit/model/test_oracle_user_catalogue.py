"""User GPU catalogue (`--hardware FILE`, `oracle.hardware`): merge rules, file:line errors, and that it
reaches every place the oracle is built; power limits outside a GPU's range are reported, not dropped."""

import json
import textwrap
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError
from easlurm.model.build import HARDWARE_ENV, build_oracle, catalogue
from easlurm.model.hardware import load_catalogue, load_user_catalogue

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "hardware" / "example-gpus.yaml"


def write(tmp_path, text):
    p = tmp_path / "gpus.yaml"
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(autouse=True)
def _no_inherited_catalogue(monkeypatch):
    """`use_hardware` exports the file for child processes; keep each test's environment its own."""
    monkeypatch.delenv(HARDWARE_ENV, raising=False)


def test_shipped_example_adds_gpus_and_overrides_one_field():
    shipped = load_catalogue()
    cat = load_user_catalogue(EXAMPLE)
    assert {"a40", "l4", "mi300x"} <= set(cat) and set(shipped) <= set(cat)
    assert cat.get("nvidia-l4").tdp_w == 72
    h100, old = cat.get("h100"), shipped.get("h100")
    assert h100.idle_w == 70 and "shared H100 data" in h100.sources["idle_w"]
    assert (h100.bf16_tflops, h100.tdp_w, h100.aliases) == (old.bf16_tflops, old.tdp_w, old.aliases)


def test_override_by_alias_keeps_the_other_fields(tmp_path):
    p = write(
        tmp_path,
        """
        gpus:
          a100:
            tdp_w: 350
        """,
    )
    cat = load_user_catalogue(p)
    a100 = cat.get("a100-40gb")
    assert a100.tdp_w == 350 and a100.bf16_tflops == load_catalogue().get("a100-40gb").bf16_tflops
    assert a100.sources["tdp_w"] == str(p)
    assert len(cat) == len(load_catalogue())


@pytest.mark.parametrize(
    "body, line, needle",
    [
        ("gpus:\n  a40:\n    tdp_w: lots\n", 3, "gpus.a40.tdp_w: must be a number > 0"),
        ("gpus:\n  h100:\n    idle_w: 1\n    tdp: 5\n", 4, "gpus.h100.tdp: unknown field"),
        ("gpus:\n  x1:\n    tdp_w: 300\n", 2, "gpus.x1: new GPU needs fp32_tflops"),
        ("gpus:\n  h100:\n    idle_w: 250\n", 2, "need idle_w < min_power_limit_w <= tdp_w"),
        ("gpus:\n  h100:\n    p0_idle_w: 900\n", 3, "gpus.h100.p0_idle_w: need idle_w <= p0_idle_w < tdp_w"),
        ("gpus:\n  h100:\n    p0_idle_w: warm\n", 3, "gpus.h100.p0_idle_w: must be a number >= 0"),
        ("gpus:\n  h100:\n    aliases: [a100]\n", 3, "alias 'a100' already names a100-40gb"),
        ("gpus:\n  h100:\n    gpus_per_node: 0\n", 3, "gpus.h100.gpus_per_node"),
        ("gpus:\n  h100: 5\n", 2, "gpus.h100: must be a mapping"),
        ("version: 1\nextra: 2\ngpus:\n  h100:\n    idle_w: 60\n", 2, "extra: unknown section"),
        ("gpus:\n  h100:\n    idle_w: [1\n", 4, "invalid YAML"),
    ],
)
def test_bad_entries_name_file_line_and_field(tmp_path, body, line, needle):
    p = tmp_path / "gpus.yaml"
    p.write_text(body)
    with pytest.raises(ConfigError) as err:
        load_user_catalogue(p)
    assert str(err.value).startswith(f"{p}:{line}:"), str(err.value)
    assert needle in str(err.value)


def test_not_a_catalogue_and_missing_file_are_one_line_errors(capsys, tmp_path):
    p = tmp_path / "gpus.yaml"
    p.write_text("- a40\n")
    with pytest.raises(ConfigError, match="'gpus' section"):
        load_user_catalogue(p)
    rc, _, err = run(capsys, "predict", "--model", "resnet50", "--hardware", str(tmp_path / "none.yaml"))
    assert rc == 2 and "none.yaml" in err and len(err.strip().splitlines()) == 1


def test_predict_uses_the_flag_and_the_configuration(capsys, tmp_path, monkeypatch):
    rc, out, err = run(
        capsys, "predict", "--model", "resnet50", "--gpu", "a40", "--hardware", str(EXAMPLE), "-P"
    )
    assert rc == 0, err
    assert out.splitlines()[1].startswith("a40|1|1|256|")  # GPUs, Nodes, Batch
    cfg = tmp_path / "easlurm.yaml"
    cfg.write_text(f"oracle:\n  hardware: {EXAMPLE}\n")
    rc, out, err = run(capsys, "-c", str(cfg), "predict", "--model", "resnet50", "--gpu", "mi300x", "-P")
    assert rc == 0, err
    assert out.splitlines()[1].startswith("mi300x|")
    monkeypatch.delenv(HARDWARE_ENV)  # each command exports its catalogue for its child processes
    rc, _, err = run(capsys, "predict", "--model", "resnet50", "--gpu", "a40")
    assert rc == 2 and "unknown GPU 'a40'" in err


def test_power_limits_outside_a_gpus_range_are_reported(capsys):
    rc, out, err = run(
        capsys, "predict", "--model", "resnet50", "--gpu", "a100,h100", "--power-limit", "300,700", "-P", "-n"
    )
    assert rc == 0
    assert len(out.strip().splitlines()) == 3  # 300 W on both, 700 W on the H100 only
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [
        "easlurm: warning: --power-limit 700W is outside a100-40gb's range 100-400 W: not predicted for a100-40gb"
    ]


def test_every_oracle_built_without_flags_sees_the_configured_catalogue(monkeypatch):
    """The simulator, trace replay and the daemon build their oracle from the configuration (which
    child processes inherit through EASLURM_ORACLE__HARDWARE)."""
    from easlurm.sim.runner import make_oracles

    assert "a40" not in build_oracle().catalogue
    monkeypatch.setenv(HARDWARE_ENV, str(EXAMPLE))
    assert "a40" in build_oracle().catalogue
    seen, truth = make_oracles(0.1, seed=1)
    assert "a40" in seen.catalogue and "a40" in truth.catalogue
    assert catalogue(EXAMPLE) is catalogue(str(EXAMPLE))  # parsed once per file version


def test_model_list_shows_user_gpus(capsys):
    rc, out, _ = run(capsys, "model", "list", "--hardware", str(EXAMPLE))
    assert rc == 0
    assert "AMD Instinct MI300X OAM" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "run", "--policy", "zeus", "--scenario", "B", "--hours", "0.01"],
        ["sim", "replay", "{bad}", "--out", "{bad}.d"],
        ["schedd", "--once", "--dry-run"],
    ],
)
def test_sim_and_schedd_validate_the_catalogue_before_any_work(capsys, tmp_path, argv):
    bad = tmp_path / "gpus.yaml"
    bad.write_text("gpus:\n  a40:\n    tdp_w: 300\n")
    rc, _, err = run(capsys, *(a.format(bad=bad) for a in argv), "--hardware", str(bad))
    assert rc == 2
    assert (
        err.strip()
        == f"easlurm: error: {bad}:2: gpus.a40: new GPU needs " + err.split("needs ", 1)[1].strip()
    )


@pytest.mark.parametrize(
    "device_name, key",
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A40", "a40"),
        ("NVIDIA B200", None),
    ],
)
def test_driver_device_names_map_to_catalogue_keys(device_name, key):
    """What `model measure` writes in the gpu column when --gpu is not given (torch.cuda.get_device_name)."""
    from easlurm.model.hardware import match_device_name

    assert match_device_name(load_user_catalogue(EXAMPLE), device_name) == key


def test_sim_run_on_a_cluster_of_user_gpus(capsys, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "name: mixed\nnodes:\n  - {name: l4n, gpu_type: l4, gpus: 8}\n  - {name: mi, gpu_type: mi300x, gpus: 8}\n"
    )
    argv = ["sim", "run", "--policy", "zeus", "--scenario", "B", "--hours", "0.2", "--cluster", str(cluster)]
    rc, out, err = run(capsys, *argv, "--hardware", str(EXAMPLE), "--json")
    assert rc == 0, err
    metrics = json.loads(out)["metrics"]
    assert metrics["util_l4"] >= 0 and metrics["util_mi300x"] > 0  # jobs ran on the user's GPUs


def test_a_gpus_architecture_is_read_and_checked(tmp_path: Path) -> None:
    """A user GPU names its architecture (per-architecture factors); an unknown one is refused by line."""
    from easlurm.model.hardware import load_user_catalogue

    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n  a100:\n    architecture: turing\n")
    assert load_user_catalogue(path).get("a100-40gb").architecture == "turing"
    path.write_text("gpus:\n  a100:\n    architecture: kepler\n")
    with pytest.raises(ConfigError, match=r"gpus\.yaml:3.*architecture.*kepler"):
        load_user_catalogue(path)
