"""Record the daemon's text queue read and `squeue --json` of the same queue, unedited, for parity tests.

    python scripts/record-squeue-text.py OUTDIR      # SLURM_CONF set; run by scripts/capture-squeue-text

Writes OUTDIR/calls.json: every command the text read ran (argv, the extra environment with the frame's
delimiters, its output) and the frames drawn, for a cold read (all user text) and a steady one (user
text of running jobs only), each followed by `squeue --json` (squeue_cold.json, squeue_steady.json),
and the one-job read of the agents (client.show_job on 22.05) of every job, then squeue_show.json.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.sched_client import CliSchedClient
from easlurm.slurm.squeue_text import SHOW_FIELDS, Frame, show_job_argv


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    client = CliSchedClient(queue_read="text")
    reader = client.queue_reader()
    calls: list[dict[str, Any]] = []
    frames: list[dict[str, str]] = []
    real_run, real_draw = reader.run, reader.draw

    def run(argv: Sequence[str], env: Mapping[str, str]) -> str:
        stdout = real_run(argv, env)
        calls.append({"argv": list(argv), "env": dict(env), "stdout": stdout})
        return stdout

    def draw(*args: Any) -> Frame:
        frame = real_draw(*args)
        frames.append({"sep": frame.sep, "end": frame.end})
        return frame

    reader.run, reader.draw = run, draw
    reads = []
    for name in ("cold", "steady"):
        n_calls, n_frames = len(calls), len(frames)
        reader.read()
        (out / f"squeue_{name}.json").write_text(client.run(["squeue", "--json"]))
        reads.append({"name": name, "calls": [n_calls, len(calls)], "frames": [n_frames, len(frames)]})
    shows = []
    for job in json.loads((out / "squeue_cold.json").read_text()).get("jobs") or ():
        frame = Frame.draw()
        argv = show_job_argv(int(job["job_id"]))
        env = frame.env(SHOW_FIELDS)
        try:
            stdout = client.run(argv, extra_env=env)
        except SlurmError:  # a finished job forgotten since (MinJobAge)
            continue
        shows.append(
            {"argv": argv, "env": env, "frame": {"sep": frame.sep, "end": frame.end}, "stdout": stdout}
        )
    (out / "squeue_show.json").write_text(client.run(["squeue", "--json"]))
    doc = {
        "version": client.run(["sinfo", "--version"]).strip(),
        "reads": reads,
        "calls": calls,
        "frames": frames,
        "shows": shows,
    }
    (out / "calls.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"record-squeue-text: {len(calls)} commands, {len(frames)} frames -> {out}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: record-squeue-text.py OUTDIR")
    main(Path(sys.argv[1]))
