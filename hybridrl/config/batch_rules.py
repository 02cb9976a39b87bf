"""Batch-size rules: train/mini count prompts (x rollout.n inside), micro counts rows per device."""

from __future__ import annotations

import math

from hybridrl.config.errors import ConfigError
from hybridrl.config.index import config_value
from hybridrl.config.sequence_parallel import DataParallel


def resolve_micro_batch_size_per_gpu(
    global_value: int | None, per_gpu_value: int | None, world_size: int, key_prefix: str,
    split_over: str | None = None,
) -> int | None:
    """The per-device micro batch from verl's two spellings: `{key_prefix}` (deprecated, global rows,
    divided by world_size: the role's data-parallel size, its ranks / its ulysses_sequence_parallel_size) or
    `{key_prefix}_per_gpu`. None when neither is set; both set is an error. `split_over`: how a message names
    world_size (default "<world_size> devices"; see sequence_parallel.DataParallel.split_over)."""
    global_key, per_gpu_key = key_prefix, f"{key_prefix}_per_gpu"
    if global_value is not None and per_gpu_value is not None:
        raise ConfigError(
            f"{global_key} ({global_value}) and {per_gpu_key} ({per_gpu_value}) are both set; "
            f"set only {per_gpu_key} (rows per device; {global_key} is verl's deprecated global spelling)"
        )
    if per_gpu_value is not None:
        if per_gpu_value < 1:
            raise ConfigError(f"{per_gpu_key} ({per_gpu_value}) must be >= 1")
        return per_gpu_value
    if global_value is None:
        return None
    if global_value < world_size:
        raise ConfigError(
            f"{global_key} ({global_value}) is a global row count split over "
            f"{split_over or f'{world_size} devices'} and must be >= {world_size}; set {per_gpu_key} instead"
        )
    return global_value // world_size


def nearby_divisors(total: int, value: int) -> list[int]:
    """The divisors of `total` just below and just above `value` (what a fix should try)."""
    small = [d for d in range(1, math.isqrt(total) + 1) if total % d == 0]  # O(sqrt(total)): totals up to 2^31
    divisors = sorted(set(small + [total // d for d in small]))
    below = [d for d in divisors if d < value]
    above = [d for d in divisors if d > value]
    return below[-1:] + above[:1]


def try_hint(options: list[int]) -> str:
    return "; try " + " or ".join(str(o) for o in options) if options else ""


def check_mini_batch(
    train: int, mini: int, n: int, dp: DataParallel, mini_key: str, micro_per_gpu: int | None, micro_key: str | None
) -> list[str]:
    """Rules linking train, mini and micro batch sizes for one trained role (actor or critic), whose ranks hold
    `dp.size` row shards."""
    if mini < 1:
        return [f"{mini_key} ({mini}) must be >= 1"]
    if mini > train:
        return [f"{mini_key} ({mini}) must be <= data.train_batch_size ({train}); both count prompts{try_hint([train])}"]
    if train % mini:
        return [f"{mini_key} ({mini}) must divide data.train_batch_size ({train}){try_hint(nearby_divisors(train, mini))}"]
    rows = mini * n
    if rows % dp.size:
        also = f", or {dp.sp_key}" if dp.sp > 1 else ""
        return [
            f"{mini_key} x rollout.n ({mini} x {n} = {rows} rows) must be divisible by {dp.divisor()}; "
            f"change {mini_key} or actor_rollout_ref.rollout.n{also}"
        ]
    per_rank = rows // dp.size
    if micro_key is not None and micro_per_gpu is not None and per_rank % micro_per_gpu:
        return [f"{micro_key} ({micro_per_gpu}) must divide {_per_rank_mini(mini_key, mini, n, dp)}"
                f"{try_hint(nearby_divisors(per_rank, micro_per_gpu))}"]
    return []


def _per_rank_mini(mini_key: str, mini: int, n: int, dp: DataParallel) -> str:
    """The per-rank mini batch with its arithmetic (without SP as before: per device)."""
    rows = mini * n // dp.size
    if dp.sp <= 1:
        return f"the per-device mini batch: {mini_key} x rollout.n / devices ({mini} x {n} / {dp.size} = {rows} rows)"
    return (f"the per-rank mini batch: {mini_key} x rollout.n / data-parallel size ({mini} x {n} / {dp.size} = "
            f"{rows} rows; {dp.derivation()})")


def micro_batch_problems(
    values: tuple[int | None, int | None], dp: DataParallel, key_prefix: str, dynamic_key: str, dynamic: bool
) -> tuple[int | None, list[str]]:
    """Resolve one (global, per-device) micro batch pair over `dp.size` row shards; neither set without dynamic
    batching is an error (as verl)."""
    try:
        micro = resolve_micro_batch_size_per_gpu(values[0], values[1], dp.size, key_prefix, dp.split_over())
    except ConfigError as exc:
        return None, [str(exc)]
    if micro is None and not dynamic:
        return None, [
            f"set {key_prefix}_per_gpu (rows per device in one forward pass, e.g. {key_prefix}_per_gpu=4) "
            f"or {dynamic_key}=true"
        ]
    return micro, []


ARR = "actor_rollout_ref"
# Token-budget micro-batches (verl's use_dynamic_bsz), per phase of the step:
# phase -> (switch key, budget key, the per-device micro batch key used when the switch is off).
DYNAMIC_BSZ_KEYS: dict[str, tuple[str, str, str]] = {
    "old_log_prob": (f"{ARR}.rollout.log_prob_use_dynamic_bsz",
                     f"{ARR}.rollout.log_prob_max_token_len_per_gpu",
                     f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu"),
    "ref": (f"{ARR}.ref.log_prob_use_dynamic_bsz", f"{ARR}.ref.log_prob_max_token_len_per_gpu",
            f"{ARR}.ref.log_prob_micro_batch_size_per_gpu"),
    "values": ("critic.use_dynamic_bsz", "critic.forward_max_token_len_per_gpu",
               "critic.forward_micro_batch_size_per_gpu"),
    "update_critic": ("critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu",
                      "critic.ppo_micro_batch_size_per_gpu"),
    "update_actor": (f"{ARR}.actor.use_dynamic_bsz", f"{ARR}.actor.ppo_max_token_len_per_gpu",
                     f"{ARR}.actor.ppo_micro_batch_size_per_gpu"),
}


def token_budget(cfg: object, phase: str) -> int | None:
    """The phase's token budget per micro batch when its use_dynamic_bsz switch is on, else None."""
    switch, budget, _ = DYNAMIC_BSZ_KEYS[phase]
    return config_value(cfg, budget) if config_value(cfg, switch) else None


def token_budget_problems(cfg: object) -> list[str]:
    """A switched-on token budget must be a positive token count."""
    problems = []
    for phase, (switch, budget, _) in DYNAMIC_BSZ_KEYS.items():
        value = token_budget(cfg, phase)
        if value is not None and (not isinstance(value, int) or value < 1):
            problems.append(f"{budget} ({value!r}) must be a positive token count when {switch}=true; "
                            "verl's tip: at least 2 x (max_prompt_length + max_response_length)")
    return problems
