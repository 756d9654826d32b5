"""An output that is an existing stream (a FIFO, /dev/null, /dev/stdout) is written in place: the atomic
rename used for files would replace the node itself (as root, /dev/null once became a regular file)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from easlurm.files import write_text_atomic


def test_a_fifo_output_is_written_in_place_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write_text_atomic(fifo, "rows\n", "--out")
    reader.join(timeout=30)
    assert got == ["rows\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary file left beside it


def test_a_file_output_is_still_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    out.write_text("old, longer than the new text\n")
    write_text_atomic(out, "new\n")
    assert out.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
