"""verl's rollout engine names and engine options, read as settings of hybridrl's own engine.

`actor_rollout_ref.rollout.name=vllm|sglang|trtllm` runs hybridrl's engine exactly as `auto` does (`hybrid`
on GPU, `hf` on CPU): the name is stored as `auto` and one info line says so. The rollout keys verl passes
to those engines keep their meaning (`gpu_memory_utilization`, `max_num_seqs`, ... are read by hybridrl's
engine; see each key's doc). Options under `rollout.engine_kwargs.<engine>` (the named engine's only, as
verl passes only those) that have a counterpart here set that key; the rest are listed as having no effect.
"""

from __future__ import annotations

from typing import Any, Callable

from hybridrl.config.genrm import check_genrm_rollout, is_genrm
from hybridrl.config.index import get_in, set_in

EXTERNAL_ENGINES = ("vllm", "sglang", "trtllm")
ROLLOUT = "actor_rollout_ref.rollout"


def _is_true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


# (engine, option path under engine_kwargs.<engine>) -> (rollout key, value -> key value or None for "no change")
Mapper = Callable[[Any], Any]
MAPPED: dict[tuple[str, str], tuple[str, Mapper]] = {
    ("vllm", "compilation_config.cudagraph_capture_sizes"): ("cudagraph_capture_sizes", lambda v: v),
    ("vllm", "compilation_config.cudagraph_mode"): ("enforce_eager", lambda v: True if str(v).upper() == "NONE" else None),
    ("vllm", "max_model_len"): ("max_model_len", lambda v: v),
    ("vllm", "max_num_seqs"): ("max_num_seqs", lambda v: v),
    ("vllm", "max_num_batched_tokens"): ("max_num_batched_tokens", lambda v: v),
    ("vllm", "enable_prefix_caching"): ("enable_prefix_caching", lambda v: v),
    ("vllm", "enforce_eager"): ("enforce_eager", lambda v: v),
    ("vllm", "seed"): ("seed", lambda v: v),
    ("sglang", "disable_radix_cache"): ("enable_prefix_caching", lambda v: False if _is_true(v) else None),
    ("sglang", "chunked_prefill_size"): ("max_num_batched_tokens", lambda v: v if isinstance(v, int) and v > 0 else None),
    ("sglang", "max_running_requests"): ("max_num_seqs", lambda v: v),
    ("sglang", "disable_cuda_graph"): ("enforce_eager", lambda v: True if _is_true(v) else None),
    ("sglang", "context_length"): ("max_model_len", lambda v: v),
    ("sglang", "random_seed"): ("seed", lambda v: v),
}
# Options refused because the setting exists in hybridrl's engine only at one value: option -> (accepted, why).
REFUSED: dict[tuple[str, str], tuple[tuple[Any, ...], str]] = {
    ("vllm", "kv_cache_dtype"): (("auto", None), "an fp8 KV cache is not implemented in hybridrl's engine (it caches "
                                                 "in rollout.dtype); remove the option"),
    ("sglang", "kv_cache_dtype"): (("auto", None), "an fp8 KV cache is not implemented in hybridrl's engine (it caches "
                                                   "in rollout.dtype); remove the option"),
}


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        return {prefix.rstrip("."): node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_leaves(value, f"{prefix}{key}."))
    return out


def apply_engine_names(tree: dict[str, Any], explicit: dict[str, str]) -> tuple[list[str], list[str]]:
    """Rewrite a resolved tree in place; returns (problems, notices)."""
    problems, notices = _reward_model_engine(tree)
    name = get_in(tree, f"{ROLLOUT}.name")
    if name not in EXTERNAL_ENGINES:
        return problems, notices
    more_problems, more_notices = _rollout_engine(tree, explicit, name)
    return problems + more_problems, notices + more_notices


def _reward_model_engine(tree: dict[str, Any]) -> tuple[list[str], list[str]]:
    """verl serves the reward model with an engine (`reward_model.rollout.*`). A discriminative one runs in process
    here; with a custom reward function it is verl's generative reward model, served by hybridrl's engine on
    loopback for the function to query (config/genrm.py)."""
    reward_model = get_in(tree, "reward_model") or {}
    notices = _resource_pool_notice(reward_model)
    if not is_genrm(reward_model, get_in(tree, "custom_reward_function.path")):
        engine = (reward_model.get("rollout") or {}).get("name")
        if reward_model.get("enable") and engine not in (None, "???"):
            notices.append(f"reward_model.rollout.name={engine}: the reward model runs in process (one forward per "
                           "response, on reward_model.device_ids); the reward_model.rollout.* engine settings have "
                           "no effect")
        return [], notices
    problems, genrm_notices = check_genrm_rollout(reward_model.get("rollout") or {})
    return problems, notices + genrm_notices


def _resource_pool_notice(reward_model: dict[str, Any]) -> list[str]:
    if not _is_true(reward_model.get("enable_resource_pool")):
        return []
    return ["reward_model.enable_resource_pool=True: no separate Ray resource pool is built; the reward model runs "
            "in the controller's process on reward_model.device_ids (null: the controller's device, shared with "
            "training), so reward_model.n_gpus_per_node and reward_model.nnodes have no effect; list the GPUs it "
            "should have to itself in reward_model.device_ids"]


def _rollout_engine(tree: dict[str, Any], explicit: dict[str, str], name: str) -> tuple[list[str], list[str]]:
    set_in(tree, f"{ROLLOUT}.name", "auto")
    notices = [f"{ROLLOUT}.name={name}: runs hybridrl's own engine, as name=auto does (hybrid on GPU, hf on CPU); "
               f"{name}'s settings apply where hybridrl's engine has them (docs/config.md)"]
    options = _leaves((get_in(tree, f"{ROLLOUT}.engine_kwargs") or {}).get(name) or {})
    problems, no_effect = [], []
    for option, value in options.items():
        if (name, option) in REFUSED:
            accepted, why = REFUSED[(name, option)]
            if value not in accepted:
                problems.append(f"{ROLLOUT}.engine_kwargs.{name}.{option}={value!r}: {why}")
        elif (name, option) in MAPPED:
            problems += _map_option(tree, explicit, name, option, value)
        else:
            no_effect.append(option)
    if no_effect:
        notices.append(f"{ROLLOUT}.engine_kwargs.{name}: {', '.join(sorted(no_effect))} configure {name} itself and "
                       "have no effect on hybridrl's engine")
    return problems, notices


def _map_option(tree: dict[str, Any], explicit: dict[str, str], engine: str, option: str, value: Any) -> list[str]:
    key, mapper = MAPPED[(engine, option)]
    mapped = mapper(value)
    if mapped is None:
        return []
    path = f"{ROLLOUT}.{key}"
    if path in explicit and get_in(tree, path) != mapped:
        return [f"{ROLLOUT}.engine_kwargs.{engine}.{option}={value!r} means {path}={mapped!r}, but {path}="
                f"{get_in(tree, path)!r} is set too; keep one"]
    set_in(tree, path, mapped)
    return []
