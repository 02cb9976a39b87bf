"""global_profiler.tool=nsys: capture ranges (cudaProfilerStart/Stop) and NVTX ranges in the right places, recorded
by patching torch.cuda.profiler / torch.cuda.nvtx (CPU torch has neither); the start-up line and its command."""

from __future__ import annotations

import logging

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.nsight import SESSION_ENV, NsysProcess, nsys_command, nvtx_range, startup_message
from hybridrl.utils.profiler_options import merged_options
from hybridrl.utils.profiling import ProfileSpec, StepProfiler, profiled_step
from tests.trainer.helpers import tiny_run_overrides


@pytest.fixture
def events(monkeypatch) -> list[str]:
    """What reaches the CUDA profiler API and NVTX, in order."""
    recorded: list[str] = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: recorded.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: recorded.append("stop"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: recorded.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: recorded.append("pop"))
    return recorded


def _spec(steps, *, continuous=False, discrete=False) -> ProfileSpec:
    return ProfileSpec("nsys", frozenset(steps), continuous, "/tmp/p", merged_options("nsys", {"discrete": discrete}))


def _worker_phases(profiler: StepProfiler) -> None:
    """A rank's update phase with the forward/backward ranges worker code wraps, and a nested phase."""
    with profiler.phase("update_actor"):
        with nvtx_range("actor/forward"):
            pass
        with nvtx_range("actor/backward"):
            pass
        with profiler.phase("update_weights"):
            pass


def test_a_cuda_rank_captures_the_run_and_names_phases_forward_and_backward(events):
    rank = StepProfiler("rank0", "cuda")
    with nvtx_range("actor/forward"):  # before the profiled run: nothing
        pass
    rank.start(_spec({2}), 2)
    _worker_phases(rank)
    rank.stop(2)
    with nvtx_range("actor/forward"), rank.phase("gen"):  # after it: nothing
        pass
    assert events == ["start", "push phase/update_actor", "push actor/forward", "pop", "push actor/backward", "pop",
                      "push phase/update_weights", "pop", "pop", "stop"]


def test_discrete_gives_each_outermost_phase_its_own_capture_range(events):
    rank = StepProfiler("rank0", "cuda")
    rank.start(_spec({1}, discrete=True), 1)
    _worker_phases(rank)
    with rank.phase("old_log_prob"):
        pass
    rank.stop(1)
    assert events == ["start", "push phase/update_actor", "push actor/forward", "pop", "push actor/backward", "pop",
                      "push phase/update_weights", "pop", "pop", "stop",
                      "start", "push phase/old_log_prob", "pop", "stop"]


def test_a_controller_without_cuda_marks_its_phases_but_never_opens_a_context(events):
    controller = StepProfiler("controller", "cpu", cuda_elsewhere=True)
    with profiled_step(_spec({3}), 3, controller):
        with controller.phase("gen"):
            pass
    assert events == ["push step 3", "push phase/gen", "pop", "pop"]


def test_a_cpu_run_calls_nothing_and_says_so(events, caplog):
    cpu = StepProfiler("controller", "cpu")
    with caplog.at_level(logging.WARNING, logger="hybridrl.profiling"):
        with profiled_step(_spec({1}), 1, cpu):
            _worker_phases(cpu)
    assert events == [] and "nothing is captured for it" in caplog.text


def test_profiled_steps_start_and_stop_the_ranks_with_the_controller(events):
    calls = []
    controller = StepProfiler("controller", "cuda")
    spec = _spec({2, 3}, continuous=True)
    for step in (1, 2, 3, 4):
        with profiled_step(spec, step, controller, lambda method, *args: calls.append((method, *args))):
            with controller.phase("gen"):
                pass
    assert calls == [("start_profile", spec, 2), ("stop_profile", 3)]
    assert events == ["start", "push step 2", "push phase/gen", "pop", "pop",
                      "push step 3", "push phase/gen", "pop", "pop", "stop"]


def test_the_startup_line_gives_the_nsys_command_and_warns_outside_nsys():
    options = merged_options("nsys", {"worker_nsight_options": {"trace": "cuda,nvtx"}})
    warning, line = startup_message([2, 3], options, "/runs/prof", environ={}, argv=["python", "-m", "hybridrl", "x=1"])
    assert warning and f"{SESSION_ENV} is unset" in line
    assert line.endswith("nsys profile --trace=cuda,nvtx --cuda-memory-usage=true --cuda-graph-trace=graph "
                         "--capture-range=cudaProfilerApi --capture-range-end=repeat --kill=none "
                         "--output=/runs/prof/hybridrl_%h_%p python -m hybridrl x=1")
    warning, line = startup_message([2], options, "/runs/prof", environ={SESSION_ENV: "7"})
    assert not warning and "nsys session 7" in line and "one capture range per profiled run" in line
    assert "--capture-range-end=repeat-shutdown:2" in nsys_command(
        merged_options("nsys", {"worker_nsight_options": {"capture-range-end": "repeat-shutdown:2"}}), "/p", ["t"])


def test_a_cpu_run_with_nsys_trains_and_logs_the_command(tmp_path, arith_model_dir, arithmetic_files, caplog,
                                                         monkeypatch):
    monkeypatch.delenv(SESSION_ENV, raising=False)
    cfg = load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path / "run"), steps=1,
                                         extra=["global_profiler.tool=nsys", "global_profiler.steps=[1]"]))
    PPOTrainer(cfg).fit()
    assert "does not run under Nsight Systems" in caplog.text and "--capture-range=cudaProfilerApi" in caplog.text
    assert "step 1's capture range ended" in caplog.text


def test_a_run_marks_only_the_profiled_step_with_its_phases_and_update_passes(tmp_path, arith_model_dir,
                                                                               arithmetic_files, events, monkeypatch):
    """A real 2-step GAE run profiling step 2, its process taken for a CUDA one (CPU torch has no NVTX): one
    capture range around step 2 holding the trainer's phases and the actor's and critic's forward/backward."""
    as_cuda = NsysProcess.__init__
    monkeypatch.setattr(NsysProcess, "__init__", lambda self, device_type, cuda_elsewhere: as_cuda(self, "cuda", False))
    cfg = load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path / "run"), algo="gae",
                                         extra=["global_profiler.tool=nsys", "global_profiler.steps=[2]"]))
    PPOTrainer(cfg).fit()
    assert events[:2] == ["start", "push step 2"] and events[-2:] == ["pop", "stop"]
    assert events.count("start") == events.count("stop") == 1
    pushed = [event.removeprefix("push ") for event in events if event.startswith("push ")]
    assert len(pushed) == events.count("pop")
    assert {"phase/gen", "phase/reward", "phase/values", "phase/adv", "phase/update_critic", "phase/update_actor",
            "phase/update_weights", "actor/forward", "actor/backward", "critic/forward", "critic/backward"} <= set(pushed)
    assert "step 1" not in pushed
