"""global_profiler.*: which steps are profiled, what each tool writes, and the config's refusals."""

from __future__ import annotations

import gzip
import json
import os
import pickle

import pytest
import torch

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.profiling import ProfileSpec, StepProfiler
from tests.trainer.helpers import tiny_run_overrides


def _spec(steps, *, continuous=False, discrete=False, tool="torch", save_path="/tmp/p") -> ProfileSpec:
    options = {"contents": ["cpu"], "discrete": discrete} if tool == "torch" else {"trace_alloc_max_entries": 1000}
    return ProfileSpec(tool, frozenset(steps), continuous, save_path, options)


@pytest.mark.parametrize("continuous,discrete,runs", [
    (False, False, [(2, 2), (3, 3), (5, 5)]),
    (True, False, [(2, 3), (5, 5)]),
    (True, True, [(2, 2), (3, 3), (5, 5)]),  # discrete profiles are per phase: steps never join
])
def test_consecutive_steps_join_only_when_continuous(continuous, discrete, runs):
    spec = _spec({2, 3, 5}, continuous=continuous, discrete=discrete)
    starts = [s for s in range(1, 7) if spec.starts_at(s)]
    ends = [s for s in range(1, 7) if spec.ends_at(s)]
    assert list(zip(starts, ends)) == runs
    assert spec.directory(2, 3).endswith("step_2-3") and spec.directory(5, 5).endswith("step_5")


def _run(model_dir, files, out, extra, steps=2):
    PPOTrainer(load_config(tiny_run_overrides(model_dir, files, out, steps=steps, extra=extra))).fit()


def test_torch_tool_traces_the_listed_step_with_named_phases(tmp_path, arith_model_dir, arithmetic_files):
    save = tmp_path / "profile"
    _run(arith_model_dir, arithmetic_files, str(tmp_path / "run"),
         ["global_profiler.tool=torch", "global_profiler.steps=[2]", f"global_profiler.save_path={save}"])
    assert sorted(os.listdir(save)) == ["step_2"]
    assert sorted(os.listdir(save / "step_2")) == ["controller.trace.json.gz", "controller.txt"]
    table = (save / "step_2" / "controller.txt").read_text()
    assert "phase/gen" in table and "phase/update_actor" in table and "aten::" in table
    with gzip.open(save / "step_2" / "controller.trace.json.gz", "rt") as f:
        names = {event.get("name") for event in json.load(f)["traceEvents"]}
    assert {"phase/gen", "phase/adv", "phase/update_actor"} <= names


def test_discrete_torch_profiles_give_each_phase_its_own_table(tmp_path, arith_model_dir, arithmetic_files):
    save = tmp_path / "profile"
    _run(arith_model_dir, arithmetic_files, str(tmp_path / "run"),
         ["global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={save}",
          "+global_profiler.global_tool_config.torch.discrete=true"], steps=1)
    files = set(os.listdir(save / "step_1"))
    assert {"controller.gen.txt", "controller.adv.txt", "controller.update_actor.txt",
            "controller.update_actor.trace.json.gz"} <= files
    assert "controller.txt" not in files
    assert "aten::" in (save / "step_1" / "controller.update_actor.txt").read_text()


def test_a_phase_inside_a_discrete_phase_is_a_range_of_the_outer_profile(tmp_path):
    profiler = StepProfiler("rank0", "cpu")
    profiler.start(_spec({1}, discrete=True, save_path=str(tmp_path)), 1)
    with profiler.phase("update_actor"), profiler.phase("update_weights"):
        torch.ones(4).sum()
    profiler.stop(1)
    assert sorted(os.listdir(tmp_path / "step_1")) == ["rank0.update_actor.trace.json.gz", "rank0.update_actor.txt"]
    assert "phase/update_weights" in (tmp_path / "step_1" / "rank0.update_actor.txt").read_text()


def test_memory_snapshots_need_cuda_and_say_what_to_use(tmp_path):
    spec = _spec({1}, tool="torch_memory", save_path=str(tmp_path))
    with pytest.raises(RuntimeError, match="global_profiler.tool=torch on CPU"):
        StepProfiler("controller", "cpu").start(spec, 1)
    # a controller whose worker ranks hold the GPUs has no allocator to snapshot: the ranks write theirs
    controller = StepProfiler("controller", "cpu", cuda_elsewhere=True)
    controller.start(spec, 1)
    controller.stop(1)
    assert not os.path.exists(tmp_path / "step_1" / "controller.memory.pickle")


@pytest.mark.gpu
def test_memory_snapshot_holds_the_step_allocations(tmp_path):
    profiler = StepProfiler("rank0", "cuda")
    profiler.start(_spec({1}, tool="torch_memory", save_path=str(tmp_path)), 1)
    held = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    profiler.stop(1)
    with open(tmp_path / "step_1" / "rank0.memory.pickle", "rb") as f:
        snapshot = pickle.load(f)
    assert any(trace["size"] == held.numel() for traces in snapshot["device_traces"] for trace in traces
               if trace["action"] == "alloc")


@pytest.mark.parametrize("overrides,message", [
    (["global_profiler.tool=npu", "global_profiler.steps=[1]"], r"Ascend NPU tools \(npu, precision_debugger\) are not"),
    (["global_profiler.tool=nsys", "global_profiler.steps=[1]",
      "+global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range=nvtx"], "must be cudaProfilerApi"),
    (["global_profiler.tool=nsys", "global_profiler.steps=[1]", "+global_profiler.global_tool_config.nsys.discrte=true"],
     "unknown option"),
    (["global_profiler.tool=torch", "global_profiler.steps=[0]"], "must list step numbers >= 1"),
    (["global_profiler.tool=torch", "global_profiler.steps=[1]", "+global_profiler.global_tool_config.torch.dicsrete=true"],
     "unknown option"),
    (["global_profiler.tool=torch", "global_profiler.steps=[1]", "+global_profiler.global_tool_config.torch.contents=[gpu]"],
     "may hold only"),
])
def test_profiler_config_problems_name_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(load_config(overrides))
