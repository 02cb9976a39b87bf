"""The dtype keys of a role's `fsdp_config` (verl semantics), checked by name before any model is built.

`model_dtype` is the dtype of the master weights (what the optimizer updates), `dtype` the compute dtype
(FSDP's mixed-precision parameter dtype), and the open dict `mixed_precision` may override it with
`param_dtype` and set `reduce_dtype` (gradient reduction) and `buffer_dtype`. Names are verl's
(`PrecisionType`): fp32/float32/32, bf16/bfloat16, fp16/float16/16.
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.errors import ConfigError
from hybridrl.config.index import config_value
from hybridrl.config.roles import critic_enabled, ref_enabled

DTYPE_NAMES = {
    "fp32": "float32", "float32": "float32", "32": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "16": "float16",
}  # fmt: skip
MIXED_PRECISION_KEYS = ("param_dtype", "reduce_dtype", "buffer_dtype")
FSDP_CONFIG_KEYS = {  # role -> where its fsdp_config lives
    "actor": "actor_rollout_ref.actor.fsdp_config",
    "ref": "actor_rollout_ref.ref.fsdp_config",
    "critic": "critic.model.fsdp_config",
}


def canonical_dtype(value: Any, key: str) -> str:
    """The torch attribute name (`float32`, `bfloat16`, `float16`) of a verl dtype name at `key`."""
    name = str(value).lower() if value is not None else None
    if name not in DTYPE_NAMES:
        raise ConfigError(f"{key}={value!r} is not a dtype; use one of {', '.join(DTYPE_NAMES)}")
    return DTYPE_NAMES[name]


def fsdp_dtype_problems(fsdp_cfg: Any, prefix: str) -> list[str]:
    """One message per bad dtype name or unknown `mixed_precision` key of one role's fsdp_config."""
    problems = []
    mixed = fsdp_cfg.mixed_precision or {}
    unknown = sorted(set(mixed) - set(MIXED_PRECISION_KEYS))
    if unknown:
        problems.append(f"{prefix}.mixed_precision has unknown key(s) {unknown}; accepted: "
                        f"{', '.join(MIXED_PRECISION_KEYS)}")
    keyed = [("model_dtype", fsdp_cfg.model_dtype), ("dtype", fsdp_cfg.dtype)]
    keyed += [(f"mixed_precision.{k}", mixed[k]) for k in MIXED_PRECISION_KEYS if mixed.get(k) is not None]
    for name, value in keyed:
        try:
            canonical_dtype(value, f"{prefix}.{name}")
        except ConfigError as err:
            problems.append(str(err))
    return problems


def precision_problems(cfg: Any) -> list[str]:
    """`fsdp_dtype_problems` of the actor, and of the reference and critic when the run uses them."""
    used = {"actor": True, "ref": ref_enabled(cfg), "critic": critic_enabled(cfg)}
    problems = []
    for role, prefix in FSDP_CONFIG_KEYS.items():
        if not used[role]:
            continue
        problems += fsdp_dtype_problems(config_value(cfg, prefix), prefix)
    return problems
