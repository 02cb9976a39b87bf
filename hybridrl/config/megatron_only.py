"""Keys verl reads only with its Megatron engine, accepted here with no effect.

verl's Megatron configs give the optimizer and the roles settings its FSDP engine does not have
(Megatron's scheduler: `lr_decay_style`, `min_lr`, ...; its optimizer: `use_precision_aware_optimizer`, the
`muon_*` options; `load_weight`). hybridrl refuses `strategy=megatron` by name, and under FSDP verl ignores
these keys, so they load (a dumped Megatron config lists them all) and are dropped; one info line names
those set to a non-default value, with the FSDP key that does the job where there is one.
"""

from __future__ import annotations

import fnmatch
from typing import Any

ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model")
OPTIM_KEYS: dict[str, Any] = {  # Megatron optimizer key -> verl's default
    "lr_warmup_init": 0.0, "lr_decay_steps": None, "lr_decay_style": "constant", "min_lr": 0.0,
    "weight_decay_incr_style": "constant", "lr_wsd_decay_style": "exponential", "lr_wsd_decay_steps": None,
    "use_checkpoint_opt_param_scheduler": False, "use_precision_aware_optimizer": False, "main_grads_dtype": "fp32",
    "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32", "use_layer_wise_distributed_optimizer": False,
}  # fmt: skip
FSDP_COUNTERPART = {"lr_decay_style": "lr_scheduler_type", "min_lr": "min_lr_ratio"}
PATTERNS: dict[str, Any] = {
    **{f"{role}.optim.{key}": default for role in ("actor_rollout_ref.actor", "critic") for key, default in OPTIM_KEYS.items()},
    **{f"{role}.optim.muon_*": None for role in ("actor_rollout_ref.actor", "critic")},
    **{f"{role}.load_weight": True for role in ROLES},
}


def is_megatron_only(path: str) -> bool:
    return path in PATTERNS or any(fnmatch.fnmatchcase(path, pattern) for pattern in PATTERNS if "*" in pattern)


def drop_megatron_only(tree: dict[str, Any], paths: list[str]) -> list[str]:
    """Remove the Megatron-only keys a source set (in place); returns the notice for non-default values."""
    changed = []
    for path in paths:
        parent, _, leaf = path.rpartition(".")
        node: Any = tree
        for part in parent.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        if path in PATTERNS and value != PATTERNS[path]:
            counterpart = FSDP_COUNTERPART.get(leaf)
            changed.append(f"{path}={value!r}" + (f" (FSDP: {parent}.{counterpart})" if counterpart else ""))
    if not changed:
        return []
    return [f"Megatron-only settings, no effect under FSDP (verl's FSDP engine ignores them too): {', '.join(changed)}"]
