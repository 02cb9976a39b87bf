"""Progress over training steps: a tqdm bar on an interactive terminal, and in a log file (no TTY) a
`progress:` line with the elapsed time, the pace and the ETA every few steps.

While the bar is open every console line goes through `terminal.write_line`, so lines and the bar never glue.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Mapping

from hybridrl.logging import terminal

# shown beside the bar: short label → metric key
_POSTFIX_KEYS: dict[str, str] = {"score": "critic/score/mean", "step_s": "timing_s/step"}
LINES_PER_RUN = 10  # non-TTY progress lines over a whole run (plus the last step's)


def format_duration(seconds: float) -> str:
    """`42s`, `3m07s`, `2h05m`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def default_every(total_steps: int, initial_step: int = 0) -> int:
    """Steps between non-TTY progress lines: about LINES_PER_RUN lines over the steps this process runs."""
    return max(1, (total_steps - initial_step) // LINES_PER_RUN)


class StepProgress:
    """`enabled=None`: the bar only when stderr is a TTY; without it (CI, `> log 2>&1`) progress lines go to stdout
    every `every` steps (default: ~10 per run) and at the last step."""

    def __init__(self, total_steps: int, initial_step: int = 0, enabled: bool | None = None,
                 every: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.total_steps, self.initial_step = total_steps, initial_step
        self.every = every or default_every(total_steps, initial_step)
        self._clock = clock
        self._start = clock()
        self._bar = None
        if enabled:
            from tqdm import tqdm  # imported here: tqdm is only needed on a terminal

            self._bar = tqdm(total=total_steps, initial=initial_step, unit="step", desc="training",
                             file=sys.stderr, dynamic_ncols=True)
            terminal.bar_opened()

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Move to `step` (the number of finished steps): the bar with the key metrics, or a progress line."""
        if self._bar is None:
            done = step - self.initial_step
            if done > 0 and (done % self.every == 0 or step >= self.total_steps):
                terminal.write_line(self.progress_line(step))
            return
        postfix = {label: f"{float(metrics[key]):.4g}" for label, key in _POSTFIX_KEYS.items() if key in metrics}
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(step - self._bar.n)

    def progress_line(self, step: int) -> str:
        """`progress: step 40/80 (50%) | elapsed 1m12s | 1.80 s/step | eta 1m12s` (pace: this process's steps)."""
        elapsed = self._clock() - self._start
        done = max(1, step - self.initial_step)
        pace = elapsed / done
        remaining = max(0, self.total_steps - step)
        percent = 100 * step / self.total_steps if self.total_steps else 100.0
        return (f"progress: step {step}/{self.total_steps} ({percent:.0f}%) | elapsed {format_duration(elapsed)} | "
                f"{pace:.2f} s/step | eta {format_duration(pace * remaining)}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            terminal.bar_closed()
