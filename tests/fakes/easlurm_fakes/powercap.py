"""A fake powercap sysfs tree with the real layout, wrap-around, root-only files and a power ticker.

Layout as on a real host (/sys/class/powercap):
  intel-rapl/enabled                      the control type
  intel-rapl:0 -> devices/intel-rapl:0    zone links; sub-zones live inside their parent
  devices/intel-rapl:0/{name,energy_uj,max_energy_range_uj,enabled}
  devices/intel-rapl:0/intel-rapl:0:0/{name=core,...}   and  intel-rapl:0:0 -> that directory
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

MAX_RANGE_UJ = 262_143_328_850  # the value a Skylake-SP package reports


class FakePowercap:
    """Build a tree under `root`; `advance()` or a ticker thread adds energy, wrapping at max range."""

    def __init__(
        self,
        root: str | Path,
        sockets: int = 1,
        subzones: tuple[str, ...] = ("core", "dram"),
        psys: bool = False,
        max_range_uj: int = MAX_RANGE_UJ,
        start_uj: int = 1_000_000,
        root_only: bool = False,
        vendor: str = "intel-rapl",
    ) -> None:
        self.root = Path(root)
        self.max_range_uj = max_range_uj
        self.zones: dict[str, Path] = {}
        self._energy: dict[str, int] = {}
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        devices = self.root / "devices"
        (self.root / vendor).mkdir(parents=True, exist_ok=True)
        (self.root / vendor / "enabled").write_text("1\n")
        for s in range(sockets):
            pkg = self._zone(devices / f"{vendor}:{s}", f"{vendor}:{s}", f"package-{s}", start_uj, root_only)
            for j, sub in enumerate(subzones):
                self._zone(
                    pkg / f"{vendor}:{s}:{j}", f"{vendor}:{s}:{j}", sub, start_uj, root_only, label_socket=s
                )
        if psys:
            self._zone(devices / f"{vendor}:{sockets}", f"{vendor}:{sockets}", "psys", start_uj, root_only)

    def _zone(
        self, d: Path, link: str, name: str, start_uj: int, root_only: bool, label_socket: int | None = None
    ) -> Path:
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "max_energy_range_uj").write_text(f"{self.max_range_uj}\n")
        (d / "enabled").write_text("1\n")
        energy = d / "energy_uj"
        energy.write_text(f"{start_uj}\n")
        if root_only:
            energy.chmod(0o400)
        (self.root / link).symlink_to(d)
        label = name if label_socket is None else f"{name}-{label_socket}"
        self.zones[label] = d
        self._energy[label] = start_uj
        self._fds[label] = os.open(energy, os.O_WRONLY)
        return d

    def energy_uj(self, label: str) -> int:
        return self._energy[label]

    def set_energy_uj(self, label: str, value: int) -> None:
        """Rewrite energy_uj in place (truncate, then write) so that open readers see the new value."""
        with self._lock:
            self._energy[label] = value % self.max_range_uj
            fd = self._fds[label]
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{self._energy[label]}\n".encode(), 0)

    def advance(self, label: str, joules: float) -> None:
        self.set_energy_uj(label, self._energy[label] + round(joules * 1e6))

    def start_ticker(self, power_w: dict[str, float], period_s: float = 0.005) -> None:
        """Add power x elapsed to each named zone every period (monotonic clock), until stop_ticker()."""

        def run() -> None:
            t_prev = time.monotonic()
            while not self._stop.wait(period_s):
                t = time.monotonic()
                for label, p in power_w.items():
                    self.advance(label, p * (t - t_prev))
                t_prev = t

        self._stop.clear()
        self._ticker = threading.Thread(target=run, name="fake-powercap-ticker", daemon=True)
        self._ticker.start()

    def stop_ticker(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2.0)
            self._ticker = None

    def close(self) -> None:
        self.stop_ticker()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def main(argv: list[str] | None = None) -> None:
    """`python -m easlurm_fakes.powercap DIR [--sockets N] [--tick package-0=80 ...]`: build a tree and,
    with --tick, keep adding energy at those powers until killed (for tests that run other processes)."""
    ap = argparse.ArgumentParser(description="Build a fake powercap tree.")
    ap.add_argument("root")
    ap.add_argument("--sockets", type=int, default=1)
    ap.add_argument("--subzones", default="core,dram")
    ap.add_argument("--root-only", action="store_true")
    ap.add_argument("--tick", action="append", default=[], help="zone=watts, e.g. package-0=80")
    ap.add_argument("--period", type=float, default=0.005, help="seconds between counter updates")
    args = ap.parse_args(argv)
    fp = FakePowercap(
        args.root, args.sockets, tuple(z for z in args.subzones.split(",") if z), root_only=args.root_only
    )
    if args.tick:
        fp.start_ticker({k: float(v) for k, v in (t.split("=", 1) for t in args.tick)}, args.period)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    fp.close()


if __name__ == "__main__":
    main()
