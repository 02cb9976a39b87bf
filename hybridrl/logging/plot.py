"""`hybridrl plot metrics.jsonl`: one subplot per metric against step, saved as a PNG (matplotlib, no display)."""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from typing import Any

from hybridrl.logging.backends import MissingDependencyError
from hybridrl.logging.file_tracker import read_metrics_jsonl

DEFAULT_KEYS: tuple[str, ...] = ("critic/score/mean", "actor/pg_loss", "actor/entropy", "response_length/mean")


def _figure_class() -> Any:
    # the object-oriented Figure renders with Agg without touching pyplot's global backend
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingDependencyError("hybridrl plot needs matplotlib; install it with "
                                     "`pip install 'hybridrl[plot]'`") from error
    return Figure


def select_keys(available: list[str], keys: list[str] | None) -> list[str]:
    """The requested keys, or the default curves present plus every `val-core/*` key; unknown keys raise."""
    if keys is None:
        chosen = [k for k in DEFAULT_KEYS if k in available] + sorted(k for k in available if k.startswith("val-core/"))
        if not chosen:
            raise ValueError(f"none of the default keys {list(DEFAULT_KEYS)} or val-core/* are in the metrics file; "
                             f"pass --keys with some of: {', '.join(sorted(available))}")
        return chosen
    for key in keys:
        if key not in available:
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


def plot_metrics(jsonl_path: str, keys: list[str] | None, out_png: str, smooth: int = 1) -> str:
    """Plot `keys` (default: score, pg_loss, entropy, response length, val-core/*) from a metrics.jsonl; returns out_png."""
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1 (a window of logged points), got {smooth}")
    by_step = read_metrics_jsonl(jsonl_path)
    if not by_step:
        raise ValueError(f"{jsonl_path} has no records yet; run at least one training step with trainer.logger "
                         f"including 'file'")
    available = sorted({key for record in by_step.values() for key in record})
    chosen = select_keys(available, keys)
    ncols = 1 if len(chosen) <= 3 else 2
    nrows = math.ceil(len(chosen) / ncols)
    figure = _figure_class()(figsize=(6.5 * ncols, 2.6 * nrows), layout="constrained")
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    for axis, key in zip(axes, chosen):
        steps, values = _series(by_step, key)
        marker = "o" if len(steps) <= 50 else None  # sparse curves (validation) read better as points
        if smooth > 1 and not key.startswith(("val-core/", "val-aux/")):  # sparse validation points: smoothing only lags
            axis.plot(steps, values, color="C0", alpha=0.3, linewidth=1)
            values = smooth_values(values, smooth)
        axis.plot(steps, values, color="C0", marker=marker, markersize=3, linewidth=1.5)
        axis.set_title(key, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.grid(alpha=0.3)
    for axis in axes[len(chosen):]:
        axis.set_visible(False)
    figure.savefig(out_png, dpi=110)
    return out_png


def main_plot(argv: list[str]) -> int:
    """`hybridrl plot <metrics.jsonl> [--keys k1 k2 ...] [-o curves.png] [--smooth N]`; 0 on success, 1 on error."""
    parser = argparse.ArgumentParser(prog="hybridrl plot", description="Plot training curves from a metrics.jsonl "
                                     "written by trainer.logger=['console','file'].")
    parser.add_argument("metrics", help="path to metrics.jsonl (in the trainer's local dir)")
    parser.add_argument("--keys", nargs="+", default=None, help="metric names to plot (default: score, pg_loss, "
                        "entropy, response_length/mean and every val-core/* key)")
    parser.add_argument("-o", "--output", default="curves.png", help="PNG to write (default: curves.png)")
    parser.add_argument("--smooth", type=int, default=1, help="trailing moving-average window in logged points, "
                        "not applied to val-* curves (default 1: raw)")
    args = parser.parse_args(argv)
    try:
        path = plot_metrics(args.metrics, args.keys, args.output, smooth=args.smooth)
    except (ValueError, FileNotFoundError, MissingDependencyError) as error:
        print(f"hybridrl plot: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main_plot(sys.argv[1:]))
