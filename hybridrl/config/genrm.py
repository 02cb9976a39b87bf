"""verl's generative reward model: `reward_model.enable` + `reward_model.rollout.name=vllm|sglang` + a custom
reward function. verl serves the reward model with that engine and passes the function `reward_router_address`
("host:port") and `reward_model_tokenizer`; the function queries the server itself (SGLang's `/generate` or
OpenAI's `/v1/chat/completions`). hybridrl serves it with its own engine (hybrid on GPU, hf on CPU) behind the
same routes on loopback (workers/genrm.py, serving/generate_server.py).

`reward_model.rollout` is an open dict (verl's RolloutConfig); its keys map onto the GenRM engine here
(`GenRMSettings`), must be 1 (parallelism), or configure vLLM/SGLang themselves and are named in one notice.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

KEY = "reward_model.rollout"
ENGINE_NAMES = ("vllm", "sglang", "trtllm", "hybrid", "hf", "auto")


@dataclass(frozen=True)
class GenRMSettings:
    """The GenRM engine's settings, with verl's reward-loop defaults (dp_reward_loop.yaml). Read as the rollout
    engine reads `actor_rollout_ref.rollout.*` (rollout.build_rollout_backend)."""

    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5  # the GenRM engine's KV-cache budget: this share of the device, less weights
    free_cache_engine: bool = True  # free its KV cache after each step's scoring (and allocate it again next step)
    enforce_eager: bool = True
    cudagraph_capture_sizes: list[int] | None = None
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None  # null: the model's max_position_embeddings (as vLLM/SGLang)
    enable_prefix_caching: bool = True
    block_size: int = 16
    keep_decode_graphs: bool = True
    seed: int | None = 0


MAPPED = tuple(f.name for f in fields(GenRMSettings))
POSITIVE_INTS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size")
MUST_BE_ONE = ("tensor_model_parallel_size", "data_parallel_size", "expert_parallel_size",
               "pipeline_model_parallel_size")
IGNORED = ("name", "mode", "_target_")  # read elsewhere, or verl's own plumbing


def is_genrm(reward_model: dict[str, Any] | Any, custom_path: Any) -> bool:
    """True for verl's GenRM setup: an enabled reward model served by an engine, and a custom reward function."""
    rollout = _get(reward_model, "rollout") or {}
    return bool(_get(reward_model, "enable")) and rollout.get("name") not in (None, "???") and custom_path is not None


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, dict) else getattr(node, key, None)


def genrm_settings(rollout: dict[str, Any]) -> GenRMSettings:
    """The mapped keys of `reward_model.rollout` (checked by `check_genrm_rollout` when the config loaded)."""
    return GenRMSettings(**{key: rollout[key] for key in MAPPED if rollout.get(key) is not None})


def genrm_backend(rollout: dict[str, Any]) -> str:
    """hybridrl's backend for `reward_model.rollout.name`: `hf` or `hybrid` as named, else `auto` (hybrid on GPU,
    hf on CPU), which verl's engine names mean here."""
    name = rollout.get("name")
    return name if name in ("hf", "hybrid") else "auto"


def check_genrm_rollout(rollout: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, notices) of `reward_model.rollout` for a served GenRM."""
    problems = [f"{KEY}.{key}={rollout[key]!r}: each engine replica of the generative reward model runs on one "
                f"device here (one replica per GPU of reward_model.device_ids, or one on the controller's device); "
                f"set {KEY}.{key}=1"
                for key in MUST_BE_ONE if rollout.get(key) not in (None, 1)]
    problems += _value_problems(rollout)
    if rollout.get("skip_tokenizer_init") is True:
        problems.append(f"{KEY}.skip_tokenizer_init=True: the GenRM server tokenizes text and chat messages (verl "
                        "asserts it is False for a reward model too); remove it")
    name = rollout.get("name")
    if name not in ENGINE_NAMES:
        problems.append(f"{KEY}.name={name!r} is not an engine name; use one of {ENGINE_NAMES} (each serves the "
                        "generative reward model with hybridrl's engine)")
    no_effect = sorted(key for key in rollout if key not in (*MAPPED, *MUST_BE_ONE, *IGNORED, "skip_tokenizer_init"))
    engine = "hybridrl's own engine (hybrid on GPU, hf on CPU)" if genrm_backend(rollout) == "auto" else \
        f"hybridrl's {name} backend"
    notices = [f"{KEY}.name={name}: the generative reward model is served by {engine} at "
               "http://127.0.0.1:<free port> (SGLang's /generate, OpenAI's /v1/chat/completions); the custom reward "
               "function gets reward_router_address and reward_model_tokenizer. Mapped: "
               f"{', '.join(key for key in MAPPED if key in rollout) or 'none set'}"]
    if no_effect:
        notices.append(f"{KEY}: {', '.join(no_effect)} have no effect on hybridrl's engine (they configure {name} "
                       "itself; its context is max_model_len, null: the model's max_position_embeddings, as in verl)")
    return problems, notices


def _value_problems(rollout: dict[str, Any]) -> list[str]:
    problems = []
    util = rollout.get("gpu_memory_utilization")
    if util is not None and (isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1):
        problems.append(f"{KEY}.gpu_memory_utilization={util!r} must be in (0, 1]: the share of the device the "
                        "GenRM engine's weights and KV cache may take; try 0.5")
    for key in POSITIVE_INTS:
        value = rollout.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{KEY}.{key}={value!r} must be a whole number >= 1 (or null for the default)")
    for key in ("free_cache_engine", "enforce_eager", "enable_prefix_caching", "keep_decode_graphs"):
        if rollout.get(key) is not None and not isinstance(rollout[key], bool):
            problems.append(f"{KEY}.{key}={rollout[key]!r} must be true or false")
    return problems
