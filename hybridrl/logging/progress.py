"""A tqdm step bar (steps, ETA, score, step time) on an interactive terminal; silent in CI and log files."""

from __future__ import annotations

import sys
from typing import Any, Mapping

# shown beside the bar: short label → metric key
_POSTFIX_KEYS: dict[str, str] = {"score": "critic/score/mean", "step_s": "timing_s/step"}


class StepProgress:
    """Progress over training steps. `enabled=None` means "only when stderr is a TTY", so CI logs stay clean."""

    def __init__(self, total_steps: int, initial_step: int = 0, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bar = None
        if enabled:
            from tqdm import tqdm  # imported here: tqdm is only needed on a terminal

            self._bar = tqdm(total=total_steps, initial=initial_step, unit="step", desc="training",
                             file=sys.stderr, dynamic_ncols=True)

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Move the bar to `step` (the number of finished steps) and show the key metrics present in `metrics`."""
        if self._bar is None:
            return
        postfix = {label: f"{float(metrics[key]):.4g}" for label, key in _POSTFIX_KEYS.items() if key in metrics}
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(step - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
