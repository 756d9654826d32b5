"""A fake GPU workload: registers itself on the fake NVML's GPU (from CUDA_VISIBLE_DEVICES) with an SM
utilisation, sleeps, and records when it ended. `python -m easlurm_fakes.gpu_load --util 30 --seconds 8`.

The registry is EASLURM_FAKE_NVML_PROCS_DIR (see fake_nvml); without it the command only sleeps."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _write(path: str, doc: dict[str, object]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_load", description=__doc__)
    parser.add_argument("--util", type=int, required=True, help="SM utilisation, percent (1..100)")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--gpu", type=int, default=None, help="GPU index (default: CUDA_VISIBLE_DEVICES[0])")
    args = parser.parse_args(argv)
    if not 1 <= args.util <= 100:
        parser.error(f"--util {args.util}: must be 1..100")
    gpu = args.gpu
    if gpu is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if not visible.isdigit():
            print("gpu_load: no GPU (CUDA_VISIBLE_DEVICES unset)", file=sys.stderr)
            return 2
        gpu = int(visible)
    registry = os.environ.get("EASLURM_FAKE_NVML_PROCS_DIR")
    path = os.path.join(registry, f"{os.getpid()}.json") if registry else None
    doc: dict[str, object] = {"pid": os.getpid(), "gpu": gpu, "sm_util": args.util, "start_s": time.time()}
    if path:
        _write(path, doc)
    try:
        time.sleep(args.seconds)
    finally:
        if path:
            _write(path, {**doc, "end_s": time.time()})
    print(f"gpu_load: pid {os.getpid()} gpu {gpu} util {args.util}% for {args.seconds:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
