"""The --energy-profile SPEC: the Python parser and the C checker agree on the shared cases; the C
checker survives a sanitizer-instrumented fuzz run."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from easlurm.energy.spec import DEVICE_KINDS, ModelNames, parse_spec
from easlurm.errors import ConfigError

SPANK = Path(__file__).resolve().parents[3] / "spank"
CASES = SPANK / "spec_cases.tsv"


def _cases() -> list[tuple[str, str]]:
    out = []
    for line in CASES.read_text().splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        expect, spec = line.split("\t")[:2]
        out.append((expect, spec))
    return out


@pytest.mark.parametrize(("expect", "spec"), _cases())
def test_python_parser_matches_shared_cases(expect: str, spec: str) -> None:
    """Every shared case is accepted or rejected as the table says (the C harness reads the same file)."""
    if expect == "ok":
        parse_spec(spec)
    else:
        with pytest.raises(ConfigError, match="--energy-profile"):
            parse_spec(spec)


def test_cases_cover_both_outcomes() -> None:
    kinds = {e for e, _ in _cases()}
    assert kinds == {"ok", "bad"}
    assert len(_cases()) > 40


def test_bare_option_means_all_devices() -> None:
    for text in (None, "", "all"):
        spec = parse_spec(text)
        assert spec.devices == DEVICE_KINDS
        assert spec.interval_s is None
        assert spec.hints() == {}


def test_devices_are_kept_in_canonical_order() -> None:
    assert parse_spec("dram,gpu").devices == ("gpu", "dram")


def test_workload_hints_are_parsed_with_units() -> None:
    spec = parse_spec(
        "model=vit-b16,steps=20000,batch=64:128:256,gpus=1:2:4:8,deadline=2h,urgent,interval=200ms"
    )
    assert spec.interval_s == pytest.approx(0.2)
    assert spec.deadline_s == pytest.approx(7200.0)
    assert spec.hints() == {
        "model": "vit-b16",
        "steps": 20000,
        "deadline_s": 7200.0,
        "batch": [64, 128, 256],
        "gpus": [1, 2, 4, 8],
        "urgent": True,
    }


def test_rejection_names_the_problem() -> None:
    with pytest.raises(ConfigError, match="unknown key 'power'"):
        parse_spec("power=300W")
    with pytest.raises(ConfigError, match="given twice"):
        parse_spec("gpu,gpu")


@pytest.fixture(scope="module")
def spec_fuzz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C harness, built with ASan+UBSan into a temporary directory."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("fuzz") / "spec_fuzz"
    cmd = [
        cc,
        "-O1",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-std=gnu11",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-o",
        str(out),
        str(SPANK / "fuzz" / "spec_fuzz.c"),
        str(SPANK / "spec.c"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0 and "sanitize" in res.stderr:
        pytest.skip(f"sanitizers unavailable: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    return out


def test_c_checker_matches_shared_cases(spec_fuzz: Path) -> None:
    res = subprocess.run([str(spec_fuzz), "--check", str(CASES)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(_cases())} cases, 0 mismatches" in res.stdout


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c_checker_survives_fuzzing(spec_fuzz: Path, seed: int) -> None:
    """Random and mutated SPECs under ASan/UBSan: no crash, every rejection carries a reason."""
    res = subprocess.run(
        [str(spec_fuzz), str(seed), "30000"], capture_output=True, text=True, check=False, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    valid = int(res.stdout.split()[3])
    assert 0 < valid < 30000  # both outcomes were exercised


def test_python_parser_agrees_with_c_on_fuzzed_inputs(spec_fuzz: Path, tmp_path: Path) -> None:
    """Mutations of valid SPECs (printable ASCII): both parsers give the same verdict."""
    import random

    rng = random.Random(7)
    seeds = [
        "all",
        "gpu,cpu",
        "interval=200ms",
        "model=vit-b16,steps=20000,batch=64:128,gpus=1:2,deadline=2h,urgent",
    ]
    alphabet = "abcdgilmnoprstuvz0123456789.,=:-_A"
    lines = []
    for _ in range(3000):
        s = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(s) + 1)
            op = rng.random()
            if op < 0.4 and pos < len(s):
                s[pos] = rng.choice(alphabet)
            elif op < 0.7:
                s.insert(pos, rng.choice(alphabet))
            elif pos < len(s):
                del s[pos]
        text = "".join(s)
        try:
            parse_spec(text)
            verdict = "ok"
        except ConfigError:
            verdict = "bad"
        lines.append(f"{verdict}\t{text}")
    cases = tmp_path / "cases.tsv"
    cases.write_text("\n".join(lines) + "\n")
    res = subprocess.run([str(spec_fuzz), "--check", str(cases)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[:2000]


# --- model names: model= checked against the oracle's names (the plugin's models= file) ---

NAMES_FIXTURE = SPANK / "fuzz" / "model_names.txt"


def _cases_with_names() -> list[tuple[str, str]]:
    """(verdict against the model names, SPEC): a case's third column when it has one, its first otherwise."""
    out = []
    for line in CASES.read_text().splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        fields = line.split("\t")
        out.append((fields[2] if len(fields) > 2 else fields[0], fields[1]))
    return out


def test_names_fixture_is_what_the_zoo_writes() -> None:
    """`make -C spank check` reads spank/fuzz/model_names.txt: it must be `easlurm model list --names`."""
    from easlurm.model.zoo import spec_model_names

    assert NAMES_FIXTURE.read_text() == spec_model_names().text()


@pytest.mark.parametrize(("expect", "spec"), _cases_with_names())
def test_python_parser_with_names_matches_shared_cases(expect: str, spec: str) -> None:
    """With the model names, an unknown model= is refused naming exactly the nearest names of the table."""
    names = ModelNames.parse(NAMES_FIXTURE.read_text())
    if expect == "ok":
        parse_spec(spec, names)
        return
    with pytest.raises(ConfigError, match="--energy-profile") as err:
        parse_spec(spec, names)
    if expect.startswith("bad:"):
        assert f"(nearest: {expect[4:].replace(',', ', ')};" in str(err.value)


def test_cases_with_names_cover_typos() -> None:
    differ = [c for c in CASES.read_text().splitlines() if c.count("\t") == 2]
    assert sum(c.split("\t")[2].startswith("bad:") for c in differ) >= 5
    assert any(c.startswith("ok\tmodel=resnet5O\t") for c in differ)


def test_model_typo_names_the_key_and_nearest_names() -> None:
    names = ModelNames.parse(NAMES_FIXTURE.read_text())
    with pytest.raises(ConfigError) as err:
        parse_spec("gpu,model=resnet5O,steps=10", names)
    msg = str(err.value)
    assert msg.startswith("--energy-profile: unknown model= 'resnet5O' (nearest: resnet50, ")
    assert "\n" not in msg
    # the oracle's reading of a name: case-insensitive, '_' as '-', its aliases
    for spelling in ("ResNet_50", "RESNET50", "vit", "Llama3"):
        assert parse_spec(f"model={spelling}", names).model == spelling
    # without names (the compute side, a site without models=) only the syntax is checked
    assert parse_spec("model=resnet5O").model == "resnet5O"


def test_nearest_names_are_distinct_zoo_names_ties_in_file_order() -> None:
    names = ModelNames.parse("# c\nabc\nabd\nxyz\nab-c abc\n")
    assert names.nearest("abx") == ["abc", "abd", "xyz"]
    assert names.nearest("ab-c", count=2) == ["abc", "abd"]  # via its alias, listed once
    assert ModelNames.parse("").nearest("x") == []


def test_unknown_key_lists_every_item() -> None:
    for spec, what in (("power=300W", "unknown key 'power'"), ("nolimt", "unknown item 'nolimt'")):
        with pytest.raises(ConfigError) as err:
            parse_spec(spec)
        msg = str(err.value)
        assert what in msg
        for item in ("all", "gpu", "cpu", "dram", "urgent", "share", "nolimit", *_KEYS_ALL):
            assert item in msg.partition("(")[2], (item, msg)


_KEYS_ALL = ("interval", "deadline", "model", "steps", "batch", "gpus")


def test_c_checker_with_names_matches_shared_cases(spec_fuzz: Path, tmp_path: Path) -> None:
    """The C harness against the names the zoo writes now: the same verdicts and nearest names."""
    from easlurm.model.zoo import spec_model_names

    names = tmp_path / "models.txt"
    names.write_text(spec_model_names().text())
    res = subprocess.run(
        [str(spec_fuzz), "--check", str(CASES), str(names)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(_cases())} cases, 0 mismatches" in res.stdout


@pytest.fixture(scope="module")
def spec_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """spank/spec.c as a shared library, to compare its messages with the Python twin's."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("speclib") / "libspec.so"
    cmd = [cc, "-O1", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-fPIC", "-shared", "-o", str(out)]
    res = subprocess.run([*cmd, str(SPANK / "spec.c")], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(out))


def _c_error(lib: ctypes.CDLL, spec: str, names: str | None = None) -> str:
    err = ctypes.create_string_buffer(512)
    raw = spec.encode()
    if lib.eas_spec_check(raw, err, ctypes.c_size_t(512)) == 0 and names is not None:
        model = raw.partition(b"model=")[2].partition(b",")[0]
        text = names.encode()
        lib.eas_model_check(text, ctypes.c_size_t(len(text)), model, ctypes.c_size_t(len(model)), err, 512)
    return err.value.decode()


@pytest.mark.parametrize(
    "spec", ["power=300W", "nolimt", "model=resnet5O", "gpu,model=Bert_Lage,steps=5", "model=llama"]
)
def test_c_and_python_give_the_same_message(spec_lib: ctypes.CDLL, spec: str) -> None:
    """The one line sbatch prints is the one the Python twin raises (after its `--energy-profile: `)."""
    text = NAMES_FIXTURE.read_text()
    with pytest.raises(ConfigError) as err:
        parse_spec(spec, ModelNames.parse(text))
    assert str(err.value) == "--energy-profile: " + _c_error(spec_lib, spec, text)


def test_training_hints_name_precision_sharding_and_checkpointing() -> None:
    """docs/oracle-llm.md: how the job trains reaches the scheduler as written; the C checker takes the
    same values (spec_cases.tsv)."""
    spec = parse_spec("model=llama3-8b,steps=100,batch=16,gpus=8,precision=amp-bf16,shard=auto,ckpt=1")
    assert (spec.precision, spec.shard, spec.ckpt) == ("amp-bf16", "auto", "1")
    assert {k: spec.hints()[k] for k in ("precision", "shard", "ckpt")} == {
        "precision": "amp-bf16",
        "shard": "auto",
        "ckpt": "1",
    }
    assert "precision" not in parse_spec("model=resnet50").hints()
    with pytest.raises(
        ConfigError, match=r"bad value in 'shard=zero4' \(one of none,zero1,zero2,zero3,fsdp,auto\)"
    ):
        parse_spec("shard=zero4")
