"""Nsight Systems (`global_profiler.tool=nsys`): NVTX ranges and CUDA-profiler-API capture ranges.

nsys records what happens between `cudaProfilerStart` and `cudaProfilerStop` (`torch.cuda.profiler.start/stop`)
when launched with `--capture-range=cudaProfilerApi`; the profiled steps are exactly those ranges, one per
profiled run of steps in each process that computes on CUDA (with `global_tool_config.nsys.discrete=true`, one
per phase instead, as verl's discrete mode gives each annotated stage its own range). Inside them NVTX ranges
name the step (`step <N>`), each phase (`phase/<name>`, the trainer's and each rank's), and whatever worker code
wraps in `nvtx_range` (forward and backward passes). Everything here is a no-op unless an nsys run is in
progress in the process, so `nvtx_range` costs one integer test otherwise; on a CPU-only process nothing is
called at all (torch's NVTX bindings exist only in CUDA builds).
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch

# Set by nsys in the processes it profiles (and inherited by their children).
SESSION_ENV = "NSYS_PROFILING_SESSION_ID"
_active_runs = 0  # nsys runs in progress in this process that emit NVTX ranges


@contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX range named `name` while an nsys run is in progress in this process, else nothing."""
    if not _active_runs:
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


class NsysProcess:
    """One process's part of an nsys run: capture ranges where it computes on CUDA, NVTX ranges in any process
    of a CUDA run (a controller whose worker ranks hold the GPUs marks its phases on the host timeline, but
    never calls the profiler API, which would open a CUDA context on GPU 0)."""

    def __init__(self, device_type: str, cuda_elsewhere: bool) -> None:
        self.captures = device_type == "cuda"
        self.marks = self.captures or cuda_elsewhere
        self.discrete = False
        self._depth = 0  # phases open now: only the outermost is a discrete capture range

    def start(self, discrete: bool) -> None:
        global _active_runs
        self.discrete, self._depth = discrete, 0
        if self.marks:
            _active_runs += 1
        if self.captures and not discrete:
            torch.cuda.profiler.start()

    def stop(self) -> None:
        global _active_runs
        if self.captures and not self.discrete:
            torch.cuda.profiler.stop()
        if self.marks:
            _active_runs = max(0, _active_runs - 1)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        own_capture = self.captures and self.discrete and self._depth == 0
        if own_capture:
            torch.cuda.profiler.start()
        self._depth += 1
        try:
            with nvtx_range(f"phase/{name}"):
                yield
        finally:
            self._depth -= 1
            if own_capture:
                torch.cuda.profiler.stop()


def under_nsys(environ: Mapping[str, str] = os.environ) -> bool:
    return bool(environ.get(SESSION_ENV))


def nsys_command(options: Mapping, save_path: str, argv: list[str] | None = None) -> str:
    """The `nsys profile` command line that records this run: verl's worker_nsight_options (trace, CUDA memory,
    graphs as a whole) with the capture range fixed to the CUDA profiler API, then this process's command."""
    flags = {**options.get("worker_nsight_options", {})}
    flags["capture-range"] = "cudaProfilerApi"  # what the profiled steps' start/stop calls drive
    # repeat: every range (each process's, each step run's) is written and the run continues; verl derives a
    # repeat-shutdown:N count per Ray worker, which one nsys session over several processes cannot.
    flags["capture-range-end"] = flags.get("capture-range-end") or "repeat"
    flags["output"] = os.path.join(save_path, "hybridrl_%h_%p")
    rendered = [f"--{key}={value}" for key, value in flags.items() if value is not None]
    command = argv if argv is not None else list(getattr(sys, "orig_argv", sys.argv))
    return shlex.join(["nsys", "profile", *rendered, *command])


def startup_message(steps: list[int], options: Mapping, save_path: str,
                    environ: Mapping[str, str] = os.environ, argv: list[str] | None = None) -> tuple[bool, str]:
    """(is_warning, line) for the start of a run with tool=nsys: under nsys, what gets captured; otherwise a
    warning that nothing is recorded, with the command line that records it."""
    mode = "each phase is its own capture range" if options.get("discrete") else "one capture range per profiled run"
    if under_nsys(environ):
        return False, (f"global_profiler.tool=nsys: steps {steps} are cudaProfilerStart/Stop capture ranges ({mode}; "
                       f"NVTX ranges name each step and phase), nsys session {environ[SESSION_ENV]}")
    return True, (f"global_profiler.tool=nsys, but this process does not run under Nsight Systems ({SESSION_ENV} is "
                  f"unset): steps {steps} will mark capture ranges that nothing records. Run it as: "
                  f"{nsys_command(options, save_path, argv)}")
