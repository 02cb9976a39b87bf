"""`global_profiler.*` rules (torch-free: the config package must not import torch).

The profiler itself is `hybridrl.utils.profiling`.
"""

from __future__ import annotations

from hybridrl.utils.profiler_options import TOOL_OPTIONS, TOOLS, TORCH_CONTENTS


def profiler_problems(profiler_cfg) -> list[str]:
    """Config rules for `global_profiler.*` (the tool's own value is checked by compat's NOT_IMPLEMENTED)."""
    if profiler_cfg.tool not in TOOLS:
        return []
    problems = []
    steps = profiler_cfg.steps or []  # none listed: nothing is profiled, as in verl (a notice says so)
    if any(not isinstance(s, int) or s < 1 for s in steps):
        problems.append(f"global_profiler.steps={steps!r} must list step numbers >= 1 (e.g. [2,3])")
    known = TOOL_OPTIONS[profiler_cfg.tool]
    unknown = sorted(set(profiler_cfg.global_tool_config.get(profiler_cfg.tool, {})) - set(known))
    if unknown:
        problems.append(f"global_profiler.global_tool_config.{profiler_cfg.tool} has unknown option(s) {unknown}; "
                        f"known: {sorted(known)}")
    capture = profiler_cfg.global_tool_config.get("nsys", {}).get("worker_nsight_options", {}).get("capture-range")
    if profiler_cfg.tool == "nsys" and capture not in (None, "cudaProfilerApi"):
        problems.append(f"global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range={capture!r}: the "
                        "profiled steps are marked with cudaProfilerStart/Stop, so it must be cudaProfilerApi")
    contents = profiler_cfg.global_tool_config.get("torch", {}).get("contents", [])
    if profiler_cfg.tool == "torch" and set(contents) - set(TORCH_CONTENTS):
        problems.append(f"global_profiler.global_tool_config.torch.contents={contents} may hold only "
                        f"{list(TORCH_CONTENTS)}")
    return problems
