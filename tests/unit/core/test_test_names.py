"""pytest imports test modules by base name (rootdir import mode): two test files with one name in
different folders stop the whole suite at collection. Each test file name is used once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_every_test_file_name_is_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
