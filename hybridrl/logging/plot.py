"""`hybridrl plot run/metrics.jsonl [other/metrics.jsonl ...]`: the curves a run needs, one panel per metric
against step, runs overlaid for comparison, and a stacked chart of where each step's time went. PNG (matplotlib,
no display).

The default panels follow the algorithm the metrics show: reward and validation, response length, KL, entropy and
the policy loss for every run; the value loss and explained variance when a critic trained (PPO/GAE).
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import sys
from typing import Any

from hybridrl.logging.backends import MissingDependencyError
from hybridrl.logging.file_tracker import read_metrics_jsonl

# Panels in order; each is shown when at least one run logged the key. val-core/* keys are added after the score.
DEFAULT_KEYS: tuple[str, ...] = ("critic/score/mean", "response_length/mean", "actor/kl_loss", "actor/ppo_kl",
                                 "actor/entropy", "actor/pg_loss", "critic/vf_loss", "critic/vf_explained_var")
# The step's phases (trainer/ppo_trainer.py), stacked in the order they run.
TIMING_PHASES: tuple[str, ...] = ("gen", "gen_max", "reward", "old_log_prob", "ref", "teacher", "values", "adv",
                                  "update_critic", "update_actor", "update_weights", "testing", "save_checkpoint")
TIMING_PANEL = "timing"  # --keys name of the stacked timing chart


def _figure_class() -> Any:
    # the object-oriented Figure renders with Agg without touching pyplot's global backend
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingDependencyError("hybridrl plot needs matplotlib; install it with "
                                     "`pip install 'hybridrl[plot]'`") from error
    return Figure


def select_keys(available: list[str], keys: list[str] | None) -> list[str]:
    """The requested keys, or the default panels present plus every `val-core/*` key; unknown keys raise."""
    if keys is None:
        present = [k for k in DEFAULT_KEYS if k in available]
        validation = sorted(k for k in available if k.startswith("val-core/"))
        chosen = present[:1] + validation + present[1:]
        if not chosen:
            raise ValueError(f"none of the default keys {list(DEFAULT_KEYS)} or val-core/* are in the metrics file; "
                             f"pass --keys with some of: {', '.join(sorted(available))}")
        return chosen
    for key in keys:
        if key != TIMING_PANEL and key not in available:
            closest = difflib.get_close_matches(key, available, n=len(available), cutoff=0.0)
            raise ValueError(f"metric {key!r} is not in the metrics file; available keys (closest first): "
                             f"{', '.join(closest)}")
    return list(keys)


def smooth_values(values: list[float], window: int) -> list[float]:
    """Trailing moving average over the last `window` points, finite ones only (NaN where there are none)."""
    smoothed = []
    for index in range(len(values)):
        finite = [v for v in values[max(0, index - window + 1): index + 1] if math.isfinite(v)]
        smoothed.append(sum(finite) / len(finite) if finite else math.nan)
    return smoothed


def _series(by_step: dict[int, dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps = [step for step in sorted(by_step) if key in by_step[step]]
    values = [math.nan if by_step[s][key] is None else float(by_step[s][key]) for s in steps]
    return steps, values


def _plot_curve(axis: Any, runs: list[tuple[str, dict]], key: str, smooth: int) -> None:
    for color, (label, by_step) in enumerate(runs):
        steps, values = _series(by_step, key)
        marker = "o" if len(steps) <= 50 else None  # sparse curves (validation) read better as points
        if smooth > 1 and not key.startswith(("val-core/", "val-aux/")):  # sparse validation points: smoothing lags
            axis.plot(steps, values, color=f"C{color}", alpha=0.3, linewidth=1)
            values = smooth_values(values, smooth)
        axis.plot(steps, values, color=f"C{color}", marker=marker, markersize=3, linewidth=1.5, label=label)
    axis.set_title(key, fontsize=9)
    if len(runs) > 1:
        axis.legend(fontsize=7)


def _plot_timing(axis: Any, label: str, by_step: dict[int, dict[str, Any]]) -> None:
    """Seconds per phase, stacked: what the step's time is made of, step by step."""
    steps = [s for s in sorted(by_step) if "timing_s/step" in by_step[s]]
    phases = [p for p in TIMING_PHASES if any(f"timing_s/{p}" in by_step[s] for s in steps)]
    stacks = [[float(by_step[s].get(f"timing_s/{p}") or 0.0) for s in steps] for p in phases]
    if phases:
        axis.stackplot(steps, stacks, labels=phases, alpha=0.85)
    axis.plot(steps, [float(by_step[s]["timing_s/step"] or 0.0) for s in steps], color="black", linewidth=1,
              label="step")
    axis.set_title(f"timing_s per phase{f' ({label})' if label else ''}", fontsize=9)
    axis.legend(fontsize=6, ncols=2, loc="upper left")


def _panels(runs: list[tuple[str, dict]], keys: list[str] | None, timing: bool) -> list[tuple[str, Any]]:
    available = sorted({key for _, by_step in runs for record in by_step.values() for key in record})
    panels: list[tuple[str, Any]] = [("curve", key) for key in select_keys(available, keys) if key != TIMING_PANEL]
    wants_timing = (keys is None and timing) or (keys is not None and TIMING_PANEL in keys)
    if wants_timing and "timing_s/step" in available:
        panels += [("timing", run) for run in runs]
    return panels


def plot_metrics(jsonl_paths: str | list[str], keys: list[str] | None, out_png: str, smooth: int = 1,
                 labels: list[str] | None = None, timing: bool = True) -> str:
    """Plot `keys` (default: the algorithm's panels and a stacked timing chart) of one or more metrics.jsonl files,
    runs overlaid; the output folder is created; returns out_png."""
    paths = [jsonl_paths] if isinstance(jsonl_paths, str) else list(jsonl_paths)
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1 (a window of logged points), got {smooth}")
    labels = labels or ([os.path.basename(os.path.dirname(os.path.abspath(p))) for p in paths] if len(paths) > 1
                        else [""])
    if len(labels) != len(paths):
        raise ValueError(f"--labels gives {len(labels)} names for {len(paths)} metrics files; give one per file")
    runs = []
    for path, label in zip(paths, labels):
        by_step = read_metrics_jsonl(path)
        if not by_step:
            raise ValueError(f"{path} has no records yet; run at least one training step with trainer.logger "
                             f"including 'file'")
        runs.append((label, by_step))
    panels = _panels(runs, keys, timing)
    ncols = 1 if len(panels) <= 3 else 2
    nrows = math.ceil(len(panels) / ncols)
    figure = _figure_class()(figsize=(6.5 * ncols, 2.6 * nrows), layout="constrained")
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    for axis, (kind, what) in zip(axes, panels):
        if kind == "curve":
            _plot_curve(axis, runs, what, smooth)
        else:
            _plot_timing(axis, *what)
        axis.set_xlabel("step", fontsize=8)
        axis.grid(alpha=0.3)
    for axis in axes[len(panels):]:
        axis.set_visible(False)
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    figure.savefig(out_png, dpi=110)
    return out_png


def main_plot(argv: list[str]) -> int:
    """`hybridrl plot <metrics.jsonl> [more.jsonl ...] [--labels ...] [--keys ...] [-o curves.png] [--smooth N]`."""
    parser = argparse.ArgumentParser(prog="hybridrl plot", description="Plot training curves from the metrics.jsonl "
                                     "of one run, or of several runs to compare (trainer.logger includes 'file').")
    parser.add_argument("metrics", nargs="+", help="metrics.jsonl files (in each run's trainer.default_local_dir)")
    parser.add_argument("--labels", nargs="+", default=None, help="one legend name per file (default: their folders)")
    parser.add_argument("--keys", nargs="+", default=None, help="metric names to plot, and 'timing' for the stacked "
                        "phase chart (default: score, val-core/*, response length, KL, entropy, pg_loss, and the value "
                        "loss and explained variance when a critic trained, then the timing chart)")
    parser.add_argument("-o", "--output", default="curves.png", help="PNG to write; folders are created "
                        "(default: curves.png)")
    parser.add_argument("--smooth", type=int, default=1, help="trailing moving-average window in logged points, "
                        "not applied to val-* curves (default 1: raw)")
    args = parser.parse_args(argv)
    try:
        path = plot_metrics(args.metrics, args.keys, args.output, smooth=args.smooth, labels=args.labels)
    except (ValueError, FileNotFoundError, MissingDependencyError) as error:
        print(f"hybridrl plot: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main_plot(sys.argv[1:]))
