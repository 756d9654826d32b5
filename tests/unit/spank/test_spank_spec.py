"""The --energy-profile SPEC: the Python parser and the C checker agree on the shared cases; the C
checker survives a sanitizer-instrumented fuzz run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from easlurm.energy.spec import DEVICE_KINDS, parse_spec
from easlurm.errors import ConfigError

SPANK = Path(__file__).resolve().parents[3] / "spank"
CASES = SPANK / "spec_cases.tsv"


def _cases() -> list[tuple[str, str]]:
    out = []
    for line in CASES.read_text().splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        expect, spec = line.split("\t", 1)
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
