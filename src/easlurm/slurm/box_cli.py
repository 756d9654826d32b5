"""`scripts/slurm-box install|up|down|status|env|node-off NODE|node-on NODE`: drive the local development
cluster. node-off and node-on are the per-node commands of the box's SuspendProgram and ResumeProgram
(`easlurm power suspend|resume`): they stop and start that node's slurmd."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time

from easlurm.config import load_config
from easlurm.errors import EaslurmError
from easlurm.slurm.box import SlurmBox


def make_box() -> SlurmBox:
    """The box configured by the `box` section (EASLURM_BOX__DIR and friends)."""
    config = load_config()
    cfg = config.section("box")
    origin = config.origin.get("box.shards_per_gpu")
    where = f"{origin}: box.shards_per_gpu" if origin else "box.shards_per_gpu"
    return SlurmBox(
        cfg["dir"],
        cfg["cluster_name"],
        cfg["base_port"],
        cfg["shards_per_gpu"],
        where,
        fake_sensors=bool(cfg["fake_sensors"]),
        suspend_time_s=cfg["suspend_time_s"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurm-box", description=__doc__)
    parser.add_argument("action", choices=["install", "up", "down", "status", "env", "node-off", "node-on"])
    parser.add_argument("node", nargs="?", help="node-off, node-on: the node")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    if (args.node is None) != (args.action not in ("node-off", "node-on")):
        parser.error(f"{args.action}: " + ("needs a NODE" if args.node is None else "takes no NODE"))
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="slurm-box: %(message)s"
    )
    try:
        box = make_box()
        if args.action == "install":
            box.install()
        elif args.action == "up":
            t0 = time.monotonic()
            box.up()
            logging.info(
                "Slurm %s up in %.1f s (state in %s)",
                box.slurm_version() or "(unknown version)",
                time.monotonic() - t0,
                box.paths.root,
            )
        elif args.action == "down":
            box.down()
        elif args.action == "node-off":
            box.node_off(args.node)
        elif args.action == "node-on":
            box.node_on(args.node)
        elif args.action == "status":
            off = {f"slurmd-{n}" for n in box.powered_down_nodes()}
            for name, pid in box.status().items():
                what = (
                    f"running pid {pid}"
                    if pid
                    else "powered down (Slurm's power saving)"
                    if name in off
                    else "stopped"
                )
                print(f"{name:<16} {what}")
            print(f"state dir        {box.paths.root}")
            print(f"slurm version    {box.slurm_version() or 'not installed'}")
            return 0 if box.is_up() else 3
        elif args.action == "env":
            for key, value in box.env.items():
                print(f"export {key}={shlex.quote(value)}")
    except EaslurmError as exc:
        print(f"slurm-box: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
