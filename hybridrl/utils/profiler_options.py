"""`global_profiler` tools and their `global_tool_config` options with defaults (torch-free: the config rules
and the profiler both read them)."""

from __future__ import annotations

TOOLS = ("torch", "torch_memory")
TORCH_CONTENTS = ("cpu", "cuda", "memory", "shapes", "stack")
TOOL_OPTIONS = {"torch": {"contents": list(TORCH_CONTENTS[:2]), "discrete": False},
                "torch_memory": {"trace_alloc_max_entries": 100_000, "stack_depth": 32}}
