"""What a person watching a run sees besides the step lines: the start banner, the progress (a bar on a terminal,
`progress:` lines in a log file) and the end summary (best validation score, time, throughput, the checkpoint and
the command that exports it).

`RunConsole` is attached to the run's `MultiTracker` (`trackers.add("run_console", console)`), so it sees every
logged step, validation at step 0 included, and prints the summary when the trackers finish.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from hybridrl.logging.banner import RunFacts, format_banner
from hybridrl.logging.progress import StepProgress, format_duration
from hybridrl.logging.terminal import write_line

CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"  # verl's name (checkpoint/manager.py)


@dataclass
class RunRecord:
    """What the summary reports, accumulated over the logged steps."""

    steps: int = 0
    tokens: float = 0.0
    throughputs: list[float] = field(default_factory=list)
    first_val: dict[str, tuple[int, float]] = field(default_factory=dict)
    best_val: dict[str, tuple[int, float]] = field(default_factory=dict)

    def observe(self, step: int, metrics: Mapping[str, Any]) -> None:
        for key, value in metrics.items():
            if key.startswith("val-core/") and "/mean@" in key and _finite(value):
                self.first_val.setdefault(key, (step, float(value)))
                if key not in self.best_val or float(value) > self.best_val[key][1]:
                    self.best_val[key] = (step, float(value))
        if "timing_s/step" not in metrics:  # validation before training logs no step
            return
        self.steps += 1
        if _finite(metrics.get("perf/total_num_tokens")):
            self.tokens += float(metrics["perf/total_num_tokens"])
        if _finite(metrics.get("perf/throughput")):
            self.throughputs.append(float(metrics["perf/throughput"]))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def latest_checkpoint(output_dir: str) -> str | None:
    """The `global_step_N` folder verl's tracker file names in `output_dir`, if a checkpoint was saved."""
    try:
        with open(os.path.join(output_dir, CHECKPOINT_TRACKER), encoding="utf-8") as handle:
            step = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    path = os.path.join(output_dir, f"global_step_{step}")
    return path if os.path.isdir(path) else None


def format_summary(record: RunRecord, seconds: float, output_dir: str) -> str:
    """The end summary: steps and time, throughput, best validation per data source, checkpoint and export."""
    pace = f", {seconds / record.steps:.2f} s/step" if record.steps else ""
    lines = [f"done: {record.steps} steps in {format_duration(seconds)}{pace}"]
    if record.throughputs:
        mean = sum(record.throughputs) / len(record.throughputs)
        lines.append(f"  throughput  {mean:,.0f} tokens/s per device (mean of steps), {record.tokens:,.0f} tokens")
    for key, (step, value) in sorted(record.best_val.items()):
        first_step, first = record.first_val[key]
        lines.append(f"  best val    {key} = {value:.4g} at step {step} (step {first_step}: {first:.4g})")
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        lines.append("  checkpoint  none saved (trainer.save_freq)")
    else:
        lines.append(f"  checkpoint  {checkpoint}")
        lines.append(f"  export      hybridrl export {checkpoint} {os.path.join(output_dir, 'hf_model')}")
    metrics_file = os.path.join(output_dir, "metrics.jsonl")
    if os.path.isfile(metrics_file):
        lines.append(f"  metrics     {metrics_file} (plot: hybridrl plot {metrics_file} -o curves.png)")
    return "\n".join(lines)


class RunConsole:
    """Banner at construction, progress per step, summary at `finish()`; a tracker of the run's MultiTracker."""

    def __init__(self, facts: RunFacts, progress_enabled: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.facts = facts
        self.record = RunRecord()
        self._clock = clock
        self._start = clock()
        write_line(format_banner(facts))
        self.progress = StepProgress(facts.total_steps, initial_step=facts.start_step, enabled=progress_enabled,
                                     clock=clock)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.record.observe(step, metrics)
        if "timing_s/step" in metrics:  # a training step (validation before training logs none)
            self.progress.update(step, metrics)

    def finish(self) -> None:
        self.progress.close()
        write_line(format_summary(self.record, self._clock() - self._start, self.facts.output_dir))
