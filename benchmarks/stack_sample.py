"""Where a Python process spends its wall time, all threads: run a script under a stack sampler, then report.

    python benchmarks/stack_sample.py --out stacks.json -- benchmarks/async_bench.py --modes colocate_async_kept_kv
    python benchmarks/stack_sample.py --report stacks.json --root async_producer.py:collect --depth 3

Every `--interval-ms` a thread of the sampler reads every other thread's stack (`sys._current_frames`), so the
counts are wall time (a thread blocked in a CUDA synchronize or a lock counts there), with no ptrace and nothing to
install (py-spy needs both on the device machines). The report takes the samples whose stack holds a frame matching
`--root` (a substring of "file:function", hybridrl files by their path inside the package) and counts them by the
`--depth` frames below it, by every frame at or below it (inclusive) and by the innermost frame, in seconds: each
sampling round stands for the run's wall time over the number of rounds (the sampler needs the GIL to read the
stacks, so a busy process stretches its rounds beyond `--interval-ms`). Samples carry no timestamps: one-time costs
(compilation, graph capture) are not told apart from each step's.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit  # noqa: E402

MAX_DEPTH = 80  # frames kept per stack, outermost first


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="sample: write the stack counts here")
    parser.add_argument("--interval-ms", type=float, default=5.0, help="sample: time between samples")
    parser.add_argument("--report", metavar="JSON", help="report on the stack counts of an earlier run")
    parser.add_argument("--root", default="", help="report: a frame (substring of file:function) to look under")
    parser.add_argument("--depth", type=int, default=3, help="report: frames below the root to group by")
    parser.add_argument("--top", type=int, default=30, help="report: rows per table")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="sample: -- script.py [its arguments]")
    args = parser.parse_args(argv)
    args.script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if bool(args.report) == bool(args.script and args.out):
        parser.error("give either --report JSON, or --out JSON -- script.py [args]")
    return args


def frame_label(code) -> str:
    path = code.co_filename
    short = path.split("hybridrl/", 1)[-1] if "hybridrl/" in path else os.path.basename(path)
    return f"{short}:{code.co_name}"


class StackSampler:
    """Counts (thread name, stack) pairs of every other thread, every `interval_s`, until stopped."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.counts: Counter[tuple[str, tuple[str, ...]]] = Counter()
        self.rounds, self.elapsed_s = 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def __enter__(self) -> "StackSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        start = time.perf_counter()
        while not self._stop.wait(self.interval_s):
            self.rounds += 1
            self.elapsed_s = time.perf_counter() - start
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    self.counts[(names.get(ident, str(ident)), stack_of(frame))] += 1

    def records(self) -> list[dict[str, Any]]:
        return [{"thread": name, "stack": list(stack), "samples": n} for (name, stack), n in self.counts.most_common()]


def stack_of(frame) -> tuple[str, ...]:
    labels = []
    while frame is not None and len(labels) < MAX_DEPTH:
        labels.append(frame_label(frame.f_code))
        frame = frame.f_back
    return tuple(reversed(labels))


def sample(script: list[str], out: str, interval_s: float) -> None:
    """Run `script` as __main__ (its own sys.argv) under the sampler; the counts go to `out` even if it fails."""
    argv, path = sys.argv, list(sys.path)
    sys.argv = list(script)
    sys.path.insert(0, str(Path(script[0]).resolve().parent))  # as `python script.py` would
    sampler = StackSampler(interval_s)
    try:
        with sampler:
            runpy.run_path(script[0], run_name="__main__")
    finally:
        sys.argv, sys.path[:] = argv, path
        seconds = sampler.elapsed_s / sampler.rounds if sampler.rounds else interval_s
        Path(out).write_text(json.dumps({"interval_s": interval_s, "seconds_per_sample": seconds,
                                         "records": sampler.records()}))


def report(data: dict[str, Any], root: str, depth: int, top: int) -> dict[str, Any]:
    below, inclusive, innermost, threads = Counter(), Counter(), Counter(), Counter()
    for record in data["records"]:
        stack, n = record["stack"], record["samples"]
        threads[record["thread"]] += n
        at = next((i for i, label in enumerate(stack) if root in label), None)
        if at is None:
            continue
        below[" > ".join(stack[at + 1:at + 1 + depth]) or "(the root itself)"] += n
        innermost[stack[-1]] += n
        for label in set(stack[at:]):
            inclusive[label] += n
    seconds = data["seconds_per_sample"]
    table = lambda counts: {key: round(n * seconds, 3) for key, n in counts.most_common(top)}  # noqa: E731
    return {"seconds_per_sample": seconds, "root": root, "seconds_per_thread": table(threads),
            "seconds_by_frames_below_root": table(below), "seconds_inclusive": table(inclusive),
            "seconds_by_innermost_frame": table(innermost)}


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    if args.report:
        result = report(json.loads(Path(args.report).read_text()), args.root, args.depth, args.top)
        emit(result)
        return result
    sample(args.script, args.out, args.interval_ms / 1000)
    return None


if __name__ == "__main__":
    main()
