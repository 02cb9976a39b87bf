"""`global_profiler` tools and their `global_tool_config` options with defaults (torch-free: the config rules
and the profiler both read them)."""

from __future__ import annotations

TOOLS = ("torch", "torch_memory", "nsys")
TORCH_CONTENTS = ("cpu", "cuda", "memory", "shapes", "stack")
# verl's nsys defaults (trainer/config/ppo_trainer.yaml): the options of the `nsys profile` command line that the
# run's start-up line prints; capture-range is always cudaProfilerApi (the profiled steps start and stop it).
NSIGHT_OPTIONS = {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"}
TOOL_OPTIONS = {"torch": {"contents": list(TORCH_CONTENTS[:2]), "discrete": False},
                "torch_memory": {"trace_alloc_max_entries": 100_000, "stack_depth": 32},
                "nsys": {"discrete": False, "controller_nsight_options": dict(NSIGHT_OPTIONS),
                         "worker_nsight_options": {**NSIGHT_OPTIONS, "capture-range": "cudaProfilerApi",
                                                   "capture-range-end": None, "kill": "none"}}}


def merged_options(tool: str, given: dict) -> dict:
    """The tool's defaults with the user's options on top (one level deep: an nsys options block keeps the
    defaults it does not override)."""
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in TOOL_OPTIONS[tool].items()}
    for key, value in given.items():
        merged[key] = {**merged[key], **value} if isinstance(merged.get(key), dict) and isinstance(value, dict) else value
    return merged
