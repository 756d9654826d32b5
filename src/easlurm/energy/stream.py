"""A helper process whose output lines carry readings (nvidia-smi -lms, perf stat -I), read by a thread."""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable, Sequence

from easlurm.errors import SensorError

log = logging.getLogger(__name__)


class LineStream:
    """Run argv, feed each line of `stream` ("stdout" or "stderr") to `on_line` from a daemon thread."""

    def __init__(self, argv: Sequence[str], on_line: Callable[[str], None], stream: str = "stdout") -> None:
        self.argv = list(argv)
        self.on_line = on_line
        self.stream = stream
        self.proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=subprocess.PIPE if self.stream == "stdout" else subprocess.DEVNULL,
                stderr=subprocess.PIPE if self.stream == "stderr" else subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        except OSError as exc:
            raise SensorError(f"cannot run {self.argv[0]}: {exc.strerror}") from exc
        self._thread = threading.Thread(target=self._pump, name=f"easlurm-{self.argv[0]}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc is not None
        pipe = self.proc.stdout if self.stream == "stdout" else self.proc.stderr
        assert pipe is not None
        for line in pipe:
            try:
                self.on_line(line)
            except Exception as exc:
                log.debug("%s: unparsable line %r (%s)", self.argv[0], line, exc)
        rc = self.proc.wait()
        if rc not in (0, -15):
            self.error = f"{self.argv[0]} exited with status {rc}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 2.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
