"""`global_profiler.*`: torch.profiler traces or CUDA memory snapshots of chosen steps, in every process.

The controller starts and stops one `StepProfiler` per process (its own, and each worker rank's through
`start_profile` / `stop_profile`), so a 2-rank run profiles the controller and both ranks for the same steps.
Files go to `<save_path>/step_<N>/` (`step_<A>-<B>/` for a consecutive run with profile_continuous_steps):

- tool=torch: `<process>.trace.json.gz` (open in Perfetto or chrome://tracing; phases are named ranges) and
  `<process>.txt` (top ops by device and host time). With `global_tool_config.torch.discrete=true` each phase
  gets its own pair instead (`<process>.<phase>.*`), which attributes kernels to phases exactly.
- tool=torch_memory: `<process>.memory.pickle`, a CUDA allocator snapshot with allocation stacks (drop it on
  https://pytorch.org/memory_viz). The snapshot is also written when the step fails, e.g. on an OOM.
  `global_tool_config.torch_memory.stack_depth` is accepted for verl's sake and has no effect: torch records
  whole Python stacks.
- tool=nsys: Nsight Systems, which records the process tree it launches (`utils/nsight.py`): the profiled steps
  are cudaProfilerStart/Stop capture ranges with NVTX ranges per step and phase; nsys writes the reports
  (`--output`), nothing is written here. `ProfileSpec.from_config` logs the `nsys profile` command line to use,
  as a warning when the process does not run under nsys.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from hybridrl.utils.nsight import NsysProcess, nvtx_range, startup_message
from hybridrl.utils.profiler_options import merged_options

# A child of the `hybridrl` logger, which `hybridrl.logging.log` configures on first use (utils sits below logging).
log = logging.getLogger("hybridrl.profiling")

TABLE_ROWS = 40


@dataclass(frozen=True)
class ProfileSpec:
    """What to profile, resolved from the config (absolute save_path: worker ranks may run elsewhere)."""

    tool: str
    steps: frozenset[int]
    continuous: bool
    save_path: str
    options: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, profiler_cfg) -> ProfileSpec | None:
        """None when profiling is off (tool null or no steps); the config is checked by `profiler_problems`.
        With tool=nsys it logs the start-up line (`nsight.startup_message`)."""
        if profiler_cfg.tool is None or not profiler_cfg.steps:
            return None
        tool = profiler_cfg.tool
        options = merged_options(tool, profiler_cfg.global_tool_config.get(tool, {}))
        spec = cls(tool, frozenset(profiler_cfg.steps), profiler_cfg.profile_continuous_steps,
                   os.path.abspath(profiler_cfg.save_path), options)
        if tool == "nsys":
            warning, line = startup_message(sorted(spec.steps), options, spec.save_path)
            (log.warning if warning else log.info)(line)
        return spec

    @property
    def discrete(self) -> bool:
        """One profile (nsys: capture range) per phase: every profiled step is then a run of its own."""
        return self.tool in ("torch", "nsys") and bool(self.options["discrete"])

    def starts_at(self, step: int) -> bool:
        return step in self.steps and not (self._joins_steps and step - 1 in self.steps)

    def ends_at(self, step: int) -> bool:
        return step in self.steps and not (self._joins_steps and step + 1 in self.steps)

    @property
    def _joins_steps(self) -> bool:
        return self.continuous and not self.discrete

    def directory(self, first: int, last: int) -> str:
        name = f"step_{first}" if first == last else f"step_{first}-{last}"
        return os.path.join(self.save_path, name)


class StepProfiler:
    """One process's profiler: `start(spec, step)` at the first step of a run, `stop()` after its last;
    `phase(name)` around each phase (a named range, or with discrete=true a profile of its own)."""

    def __init__(self, label: str, device: torch.device | str, *, cuda_elsewhere: bool = False) -> None:
        """`device`: where this process computes. `cuda_elsewhere`: a controller that leaves the GPUs to its
        worker ranks (a CUDA profile or snapshot here would only open a context on GPU 0): it profiles its
        host side, and has no allocator to snapshot."""
        self.label = label
        self.device = torch.device(device)
        self.cuda_elsewhere = cuda_elsewhere
        self.spec: ProfileSpec | None = None
        self.first_step = 0
        self._session = None  # the running torch.profiler.profile (whole-step mode)
        self._phase_calls: dict[str, int] = {}  # discrete: a phase entered again gets a numbered file
        self._phase_session = None  # discrete: the phase profile running now (a nested phase becomes a range in it)
        self._nsys = NsysProcess(self.device.type, cuda_elsewhere)

    def start(self, spec: ProfileSpec, step: int) -> None:
        if spec.tool == "torch_memory" and self.cuda_elsewhere:
            return  # the ranks write the snapshots
        if spec.tool == "nsys":
            if not self._nsys.marks:
                log.warning(f"global_profiler.tool=nsys: {self.label} runs on {self.device}, and Nsight Systems "
                            "records CUDA work: nothing is captured for it (use global_profiler.tool=torch on CPU)")
            self.spec, self.first_step = spec, step
            self._nsys.start(spec.discrete)
            return
        if spec.tool == "torch_memory" and self.device.type != "cuda":
            raise RuntimeError(f"global_profiler.tool=torch_memory snapshots the CUDA allocator, but {self.label} "
                               f"runs on {self.device}; use global_profiler.tool=torch on CPU")
        self.spec, self.first_step = spec, step
        self._phase_calls.clear()
        if spec.tool == "torch_memory":
            torch.cuda.memory._record_memory_history(max_entries=spec.options["trace_alloc_max_entries"],
                                                     stacks="python")
        elif not spec.options["discrete"]:
            self._session = self._torch_profile()
            self._session.__enter__()

    def stop(self, step: int) -> None:
        """End the run started by `start` (at `step`, its last) and write its files."""
        spec, self.spec = self.spec, None
        if spec is None:
            return
        if spec.tool == "nsys":  # nsys writes the report itself
            self._nsys.stop()
            return
        directory = spec.directory(self.first_step, step)
        os.makedirs(directory, exist_ok=True)
        if spec.tool == "torch_memory":
            torch.cuda.memory._dump_snapshot(os.path.join(directory, f"{self.label}.memory.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
        elif self._session is not None:  # discrete: every phase already wrote its own files
            session, self._session = self._session, None
            session.__exit__(None, None, None)
            _write_torch_profile(session, os.path.join(directory, self.label), self.device)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A phase of the profiled step: a named range in the step's trace, or (discrete) its own profile."""
        if self.spec is not None and self.spec.tool == "nsys":
            with self._nsys.phase(name):
                yield
            return
        if self.spec is None or self.spec.tool != "torch":
            yield
            return
        if not self.spec.options["discrete"] or self._phase_session is not None:
            with torch.profiler.record_function(f"phase/{name}"):
                yield
            return
        calls = self._phase_calls[name] = self._phase_calls.get(name, 0) + 1
        stem = f"{self.label}.{name}" + (f".{calls}" if calls > 1 else "")
        session = self._phase_session = self._torch_profile()
        try:
            with session:
                yield
        finally:
            self._phase_session = None
            directory = self.spec.directory(self.first_step, self.first_step)
            os.makedirs(directory, exist_ok=True)
            _write_torch_profile(session, os.path.join(directory, stem), self.device)

    def _torch_profile(self):
        from torch.profiler import ProfilerActivity, profile

        contents = set(self.spec.options["contents"])
        activities = [ProfilerActivity.CPU] if "cpu" in contents else []
        if "cuda" in contents and self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        return profile(activities=activities, record_shapes="shapes" in contents,
                       profile_memory="memory" in contents, with_stack="stack" in contents)


def _write_torch_profile(session, stem: str, device: torch.device) -> None:
    """`<stem>.trace.json.gz` and `<stem>.txt` (top ops by device time, then host time)."""
    session.export_chrome_trace(f"{stem}.trace.json.gz")
    averages = session.key_averages()
    keys = ("device_time_total", "cpu_time_total") if device.type == "cuda" else ("cpu_time_total",)
    with open(f"{stem}.txt", "w") as f:
        for key in keys:
            f.write(f"== {os.path.basename(stem)}, top {TABLE_ROWS} by {key}\n"
                    f"{averages.table(sort_by=key, row_limit=TABLE_ROWS)}\n")


@contextmanager
def profiled_step(spec: ProfileSpec | None, step: int, local: StepProfiler,
                  call_ranks: Callable[..., list] | None = None) -> Iterator[None]:
    """Around step `step` of the controller: start `local` and every worker rank (`call_ranks(method, *args)`)
    at the first step of a profiled run, stop them after its last, or when the step fails (so an OOM still
    leaves its memory snapshot)."""
    if spec is None or step not in spec.steps:
        yield
        return
    call_ranks = call_ranks or (lambda method, *args: [])
    if spec.starts_at(step):
        local.start(spec, step)
        call_ranks("start_profile", spec, step)
    failed = True
    try:
        with nvtx_range(f"step {step}"):  # nsys only: a no-op unless an nsys run is in progress here
            yield
        failed = False
    finally:
        if failed or spec.ends_at(step):
            _stop_everywhere(spec, local, call_ranks, step, failed)


def _stop_everywhere(spec: ProfileSpec, local: StepProfiler, call_ranks: Callable[..., list], step: int,
                     failed: bool) -> None:
    directory = spec.directory(local.first_step, step)
    local.stop(step)
    try:
        call_ranks("stop_profile", step)
    except Exception as exc:  # noqa: BLE001 - only while the step's own error propagates
        if not failed:
            raise
        log.warning(f"worker ranks' profiles of step {step} were not written ({type(exc).__name__}: {exc}); "
                    "the step's own error follows")
    if spec.tool == "nsys":
        log.info(f"global_profiler (nsys): step {step}'s capture range ended; nsys writes its report")
    else:
        log.info(f"global_profiler ({spec.tool}): step {step}'s profile is in {directory}")
