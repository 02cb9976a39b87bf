"""Schema of verl's per-role `profiler` blocks (`actor_rollout_ref.{actor,ref,rollout}`, `critic`, `reward_model`)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import setting

ROLE_PROFILER_DOC = ("verl's per-role profiler switch; hybridrl's global_profiler profiles every role and rank when "
                     "its tool is set, so the role settings select nothing more (a notice says so when one is set).")


@dataclass
class RoleProfilerConfig:
    """One role's profiling in verl (hybridrl: `global_profiler.*` covers every role)."""

    tool: str | None = setting(None, "Profiler of this role; follows global_profiler.tool.", ref="${oc.select:global_profiler.tool,null}")
    enable: bool = setting(False, "Profile this role (verl); hybridrl profiles every role when global_profiler.tool is set.")
    all_ranks: bool = setting(False, "Profile every rank of the role (hybridrl always does).")
    ranks: list[int] = setting([], "Ranks to profile (verl); hybridrl profiles every rank.")
    save_path: str | None = setting("outputs/profile", "Where this role's traces go; follows global_profiler.save_path.",
                                    ref="${oc.select:global_profiler.save_path,null}")
    tool_config: dict = setting({}, "Per-tool options of this role (nsys, npu, torch, torch_memory; open dict); "
                                    "hybridrl reads global_profiler.global_tool_config instead.")
    relocate_results: bool = setting(False, "Either value (see global_profiler.relocate_results).")
    finish_hook_cmd: str | None = setting(None, "Command run when profiling ends (verl); not implemented: null only.")
    finish_hook_all_ranks: bool = setting(False, "Run finish_hook_cmd on every rank (verl).")
    finish_hook_ranks: list[int] = setting([], "Ranks running finish_hook_cmd (verl).")
