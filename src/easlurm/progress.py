"""One progress bar for long work (calibration, measurement, replay): click's, on stderr."""

from __future__ import annotations

import sys
from typing import Any

import click


def progressbar(*args: Any, **kw: Any) -> Any:
    """click.progressbar, typed as Any: click 8.3 and later type its context manager as `object`, which
    mypy refuses in a `with` statement, and the bar's API is the same in every click 8 release."""
    kw.setdefault("file", sys.stderr)
    return click.progressbar(*args, **kw)
