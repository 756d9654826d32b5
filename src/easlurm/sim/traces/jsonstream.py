"""Stream the elements of one top-level array of a big JSON document (e.g. `sacct --json`'s "jobs")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from easlurm.errors import TraceError

_WS = " \t\r\n"


class JsonArrayStream:
    """Decode `{..., "<key>": [obj, obj, ...], ...}` one element at a time, keeping the other keys.

    Only the current element is held in memory, so a multi-GB dump streams. Each element comes
    with the line it starts on, for messages.
    """

    def __init__(self, fh: TextIO, where: str, key: str = "jobs", chunk_chars: int = 1 << 20) -> None:
        self.fh = fh
        self.where = where
        self.key = key
        self.chunk = chunk_chars
        self.buf = ""
        self.pos = 0
        self.base_line = 1  # line number of buf[0]
        self.eof = False
        self.others: dict[str, Any] = {}
        self.found = False
        self._decoder = json.JSONDecoder()

    def _fill(self, size: int | None = None) -> bool:
        if self.eof:
            return False
        data = self.fh.read(size or self.chunk)
        if not data:
            self.eof = True
            return False
        if self.pos > 0:
            self.base_line += self.buf.count("\n", 0, self.pos)
            self.buf = self.buf[self.pos :]
            self.pos = 0
        self.buf += data
        return True

    def line(self) -> int:
        return self.base_line + self.buf.count("\n", 0, self.pos)

    def _peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def _expect(self, chars: str) -> str:
        c = self._peek()
        if c == "" or c not in chars:
            found = repr(c) if c else "end of file"
            raise TraceError(
                f"{self.where}:{self.line()}: invalid JSON: expected {' or '.join(chars)}, got {found}"
            )
        self.pos += 1
        return c

    def _value(self) -> Any:
        self._peek()
        size = self.chunk
        while True:
            try:
                value, end = self._decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._fill(size):
                    size *= 2
                    continue
                line = self.base_line + self.buf.count("\n", 0, exc.pos)
                raise TraceError(f"{self.where}:{line}: invalid JSON: {exc.msg}") from None
            if end >= len(self.buf) and not self.eof and self._fill(size):
                continue  # a number cut by the chunk boundary: decode again with more text
            self.pos = end
            return value

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        self._expect("{")
        if self._peek() == "}":
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise TraceError(f"{self.where}:{self.line()}: invalid JSON: object key is not a string")
            self._expect(":")
            if key == self.key:
                self.found = True
                self._expect("[")
                if self._peek() == "]":
                    self.pos += 1
                else:
                    while True:
                        self._peek()
                        line = self.line()
                        yield line, self._value()
                        if self._expect(",]") == "]":
                            break
            else:
                self.others[key] = self._value()
            if self._expect(",}") == "}":
                return
