"""Lines to the terminal that never glue to a progress bar: while a tqdm bar is open, lines go through
`tqdm.write` (which clears the bar, writes the line and redraws the bar); otherwise they are plain prints."""

from __future__ import annotations

import sys
from typing import TextIO

_open_bars = 0  # tqdm bars StepProgress holds open in this process


def bar_opened() -> None:
    global _open_bars
    _open_bars += 1


def bar_closed() -> None:
    global _open_bars
    _open_bars = max(0, _open_bars - 1)


def bars_open() -> bool:
    return _open_bars > 0


def write_line(text: str, file: TextIO | None = None) -> None:
    """`text` and a newline to `file` (stdout by default), flushed; around the open progress bar if there is one."""
    file = sys.stdout if file is None else file
    if bars_open():
        from tqdm import tqdm

        tqdm.write(text, file=file)
        file.flush()
    else:
        print(text, file=file, flush=True)
