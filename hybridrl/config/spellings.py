"""verl's other spellings of hybridrl's keys, from verl 0.4 to its August-2026 tree.

hybridrl keeps one internal key per setting (verl's January-2026 layout: `reward_model.*`, `reward_manager.*`,
`custom_reward_function.*`, `critic.model.fsdp_config.*`); every other spelling verl has used is moved onto it
while the config loads. docs/config.md has the table. Keys whose meaning moved to several keys (verl 0.5's
`tis_imp_ratio_cap`, verl 0.6's `algorithm.rollout_is*`) are translated in `legacy.py`.
"""

from __future__ import annotations

import re

# Older or newer spelling -> internal key (exact keys).
ALIASES: dict[str, str] = {
    "actor_rollout_ref.actor.optim.warmup_style": "actor_rollout_ref.actor.optim.lr_scheduler_type",
    "critic.optim.warmup_style": "critic.optim.lr_scheduler_type",
    "ray_init.timeline_json_file": "ray_kwargs.timeline_json_file",
    "trainer.profile_steps": "global_profiler.steps",
    # verl's SAPO examples (Aug. 2026) add these with `+`; verl's SAPO loss reads actor.tau_pos / tau_neg.
    "actor_rollout_ref.actor.policy_loss.tau_pos": "actor_rollout_ref.actor.tau_pos",
    "actor_rollout_ref.actor.policy_loss.tau_neg": "actor_rollout_ref.actor.tau_neg",
    # The August-2026 tree's `reward.*` group (verl/trainer/config/reward/reward.yaml).
    "reward.num_workers": "reward_model.num_workers",
    "reward.reward_model.enable": "reward_model.enable",
    "reward.reward_model.enable_resource_pool": "reward_model.enable_resource_pool",
    "reward.reward_model.n_gpus_per_node": "reward_model.n_gpus_per_node",
    "reward.reward_model.nnodes": "reward_model.nnodes",
    "reward.reward_model.model_path": "reward_model.model.path",
}

# Older or newer group -> internal group: every key below the first moves below the second.
PREFIX_ALIASES: tuple[tuple[str, str], ...] = (
    ("ray_init", "ray_kwargs.ray_init"),  # verl 0.4 kept ray.init kwargs at the top level
    ("reward.custom_reward_function", "custom_reward_function"),
    ("reward.reward_manager", "reward_manager"),
    ("reward.reward_kwargs", "reward_model.reward_kwargs"),
    ("reward.reward_model.rollout", "reward_model.rollout"),
    ("reward.sandbox_fusion", "reward_model.sandbox_fusion"),
    ("sandbox_fusion", "reward_model.sandbox_fusion"),  # the August tree's legacy top-level group
    ("critic.fsdp", "critic.model.fsdp_config"),  # the August tree's critic engine group
)

# Internal keys the August tree also lists in `legacy_reward_impl.yaml` with null meaning "not set" (its
# migration copies only non-null values into `reward.*`): a null there keeps hybridrl's value.
NULL_MEANS_UNSET: frozenset[str] = frozenset({
    "custom_reward_function.name",
    "reward_model.num_workers", "reward_model.reward_manager", "reward_model.enable",
    "reward_model.enable_resource_pool", "reward_model.n_gpus_per_node", "reward_model.nnodes",
    "reward_model.reward_loop_source", "reward_model.model.path", "reward_model.model.trust_remote_code",
    "reward_model.sandbox_fusion.max_concurrent", "reward_model.sandbox_fusion.memory_limit_mb",
    "critic.model.tokenizer_path",  # the August tree's HFModelConfig: null = the model's own; here: follow the actor
})  # fmt: skip
NULL_MEANS_UNSET_GROUPS = ("reward_model.rollout.",)  # the legacy group's engine settings, all null there


def null_means_unset(path: str) -> bool:
    """Whether a null for this internal key means "not set" (see NULL_MEANS_UNSET)."""
    return path in NULL_MEANS_UNSET or path.startswith(NULL_MEANS_UNSET_GROUPS)


def canonical_path(path: str) -> str:
    """The internal spelling of a dotted key (unchanged when it already is one)."""
    if path in ALIASES:
        return ALIASES[path]
    for old, new in PREFIX_ALIASES:
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def is_alias_prefix(path: str) -> bool:
    """True for a group that exists only as another spelling (`reward`, `critic.fsdp`): its keys move one by one."""
    prefix = path + "."
    return any(old == path or old.startswith(prefix) for old, _ in PREFIX_ALIASES) or any(
        old.startswith(prefix) for old in ALIASES
    )


def referenced_aliases(texts: list[str]) -> dict[str, str]:
    """Alias spellings named inside `${...}` references (old -> internal), so a YAML written against the
    other layout (`${reward.reward_manager.name}`) still resolves."""
    found = {}
    for old, new in [*ALIASES.items(), *PREFIX_ALIASES]:
        pattern = re.compile(r"(?<![\w.])" + re.escape(old) + r"(?![\w])")
        if any(pattern.search(text) for text in texts):
            found[old] = new
    return found
