"""The valid range of every numeric config key, and the check `validate_config` runs first.

One table, keyed by the dotted key (`RANGES`): a `Range` (bounds, meaningful special values, whether
NaN/inf mean anything) and a short reason that goes into the error, so a value that would silently
corrupt training (a negative `grad_clip` reverses every update, `ppo_epochs=0` never updates, a NaN
`lam` makes every advantage NaN) is refused before anything loads, naming the key, the value, the
rule and a fix. A key whose every value means something is listed as `ANY_FLOAT`/`ANY_INT`, so a
schema key without an entry is a test failure, not a silent pass. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hybridrl.config.index import config_tree, get_in, schema_index

INT_MAX = 2**31 - 1  # counts above this are no real setting (and overflow 32-bit indices in kernels)
SEED_MAX = 2**32 - 1  # numpy's seed range (trainer.seed also seeds numpy)


@dataclass(frozen=True)
class Range:
    """Allowed values of one numeric key: `low`/`high` bounds (None: unbounded; `*_open`: strict),
    `also` (values outside the bounds that mean something, e.g. -1 = "all"), `infinite_ok` (+inf means
    something, e.g. no clipping), `why` (the meaning, quoted in the error)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple[float, ...] = ()
    infinite_ok: bool = False
    why: str = ""

    def allows(self, value: float) -> bool:
        if value in self.also:
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return self.infinite_ok and value > 0  # NaN never; +inf where it means "no limit"
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None and (value > self.high or (self.high_open and value == self.high)))

    def rule(self) -> str:
        """The rule in words, e.g. `> 0 (or inf)`, `in [0, 1]`, `-1 or >= 1`."""
        if self.low is not None and self.high is not None and self.high != INT_MAX:
            text = f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            text = "a finite number"
        specials = " or ".join(_num(v) for v in self.also)
        text = f"{specials} or {text}" if specials else text
        return text + (" (or inf)" if self.infinite_ok else "")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def at_least(low: float, why: str = "", *, also: tuple[float, ...] = (), high: float | None = INT_MAX) -> Range:
    return Range(low=low, high=high, also=also, why=why)


def positive(why: str = "", *, infinite_ok: bool = False) -> Range:
    return Range(low=0, low_open=True, infinite_ok=infinite_ok, why=why)


def non_negative(why: str = "", *, infinite_ok: bool = False) -> Range:
    return Range(low=0, infinite_ok=infinite_ok, why=why)


def unit(why: str = "", *, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low=0, high=1, low_open=low_open, high_open=high_open, why=why)


ANY_FLOAT = Range(why="any finite value means something")
ANY_INT = Range(low=-INT_MAX, high=INT_MAX, why="any value means something")
COUNT = at_least(1, "a count")
COUNT_OR_ZERO = at_least(0, "a count; 0 = none")
SEED = Range(low=0, high=SEED_MAX, why="a seed; numpy takes 0 .. 2^32-1")
TOKENS = at_least(1, "a token count")
GRAD_CLIP = positive("the gradient-norm bound: 0 zeroes every update and a negative value reverses it "
                     "(torch's clip_grad_norm_ scales by max_norm / norm); inf = no clipping", infinite_ok=True)
PER_GPU_MICRO = at_least(1, "rows per device per forward")

_FSDP = {
    "wrap_policy.min_num_params": at_least(0, "0 = one FSDP unit per transformer layer"),
    "fsdp_size": at_least(1, "ranks per shard group", also=(-1,)),  # -1 = every rank of the role
    "seed": SEED,
    "ulysses_sequence_parallel_size": COUNT,
    "entropy_from_logits_chunk_size": COUNT,
    "pad_to_length_bucket": COUNT,
    "qat.group_size": COUNT,
}
_MTP = {"speculative_num_steps": COUNT, "speculative_eagle_topk": COUNT, "speculative_num_draft_tokens": COUNT,
        "num_speculative_tokens": COUNT, "mtp_loss_scaling_factor": non_negative("a loss weight")}
_CLIPS = {key: non_negative("a clip epsilon: the ratio is kept in [1 - low, 1 + high]")
          for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high")}
_OPTIM = {
    "lr": non_negative("the learning rate"),
    "lr_warmup_steps_ratio": unit("a fraction of the total steps"),
    "total_training_steps": at_least(1, "set by the trainer", also=(-1,)),
    "weight_decay": non_negative("decoupled weight decay; a negative value grows the weights"),
    "lr_warmup_steps": ANY_INT,  # <= 0 = use lr_warmup_steps_ratio
    "clip_grad": GRAD_CLIP,
    "min_lr_ratio": unit("a fraction of lr"),
    "num_cycles": non_negative("cosine cycles"),
}
_LORA = {"lora_rank": at_least(0, "0 = full fine-tuning"), "lora_alpha": at_least(1, "the LoRA scale is alpha / rank")}
_LOG_PROB = {
    "log_prob_micro_batch_size": PER_GPU_MICRO,
    "log_prob_micro_batch_size_per_gpu": PER_GPU_MICRO,
    "log_prob_max_token_len_per_gpu": TOKENS,
}
_SAMPLING = {
    "top_k": at_least(-1, "-1 or 0 = off"),
    "top_p": unit("the nucleus mass", low_open=True),
    "temperature": non_negative("0 = greedy"),
    "n": COUNT,
}


_REMOTE_CLIENT = {  # a remote scoring endpoint's client (reward_model.remote, critic.remote)
    "timeout_s": positive("seconds: the whole of one HTTP request"),
    "max_retries": at_least(0, "retries of a failed request; 0 = one attempt"),
    "backoff_s": non_negative("seconds before the first retry, doubled for each further one"),
}


def _under(prefix: str, rules: dict[str, Range]) -> dict[str, Range]:
    return {f"{prefix}.{key}": rule for key, rule in rules.items()}


_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
_MODEL = "actor_rollout_ref.model"

RANGES: dict[str, Range] = {
    "data.train_max_samples": at_least(1, "-1 = every row", also=(-1,)),
    "data.val_max_samples": at_least(1, "-1 = every row", also=(-1,)),
    "data.max_prompt_length": TOKENS,
    "data.max_response_length": TOKENS,
    "data.train_batch_size": at_least(1, "prompts per step"),
    "data.val_batch_size": COUNT,
    "data.gen_batch_size": at_least(1, "prompts per generation batch (a DAPO dynamic-sampling round)"),
    "data.seed": SEED,
    "data.dataloader_num_workers": COUNT_OR_ZERO,
    "data.image_patch_size": COUNT,
    "data.filter_overlong_prompts_workers": COUNT,
    "actor_rollout_ref.nccl_timeout": at_least(1, "seconds"),
    **_under(_MODEL, _LORA),
    f"{_MODEL}.tiled_mlp.num_shards": COUNT,
    **_under(f"{_MODEL}.mtp", _MTP),
    f"{_ACTOR}.ppo_mini_batch_size": at_least(1, "prompts per optimizer step"),
    f"{_ACTOR}.ppo_micro_batch_size": PER_GPU_MICRO,
    f"{_ACTOR}.ppo_micro_batch_size_per_gpu": PER_GPU_MICRO,
    f"{_ACTOR}.ppo_max_token_len_per_gpu": TOKENS,
    **_under(_ACTOR, _CLIPS),
    f"{_ACTOR}.policy_loss.dro_beta": positive("dro's quadratic log-ratio penalty weight"),
    f"{_ACTOR}.entropy_from_logits_chunk_size": COUNT,
    f"{_ACTOR}.qat.group_size": COUNT,
    **{f"{role}.rollout_n": COUNT for role in (_ACTOR, "actor_rollout_ref.ref")},
    "actor_rollout_ref.ref.entropy_from_logits_chunk_size": COUNT,
    f"{_ACTOR}.tau_pos": positive("a SAPO gate temperature (divides)"),
    f"{_ACTOR}.tau_neg": positive("a SAPO gate temperature (divides)"),
    f"{_ACTOR}.policy_loss.clip_cov_ratio": unit("a fraction of tokens"),
    f"{_ACTOR}.policy_loss.clip_cov_lb": ANY_FLOAT,
    f"{_ACTOR}.policy_loss.clip_cov_ub": ANY_FLOAT,
    f"{_ACTOR}.policy_loss.kl_cov_ratio": unit("a fraction of tokens"),
    f"{_ACTOR}.policy_loss.ppo_kl_coef": non_negative("a KL weight"),
    f"{_ACTOR}.clip_ratio_c": Range(low=1, low_open=True, why="the dual-clip bound (Ye et al. 2020) is > 1"),
    f"{_ACTOR}.loss_scale_factor": positive("the divisor of seq-mean-token-sum-norm"),
    f"{_ACTOR}.entropy_coeff": ANY_FLOAT,  # negative = entropy penalty; NaN/inf make every loss non-finite
    f"{_ACTOR}.kl_loss_coef": non_negative("a KL weight; a negative one rewards drifting from the reference"),
    f"{_ACTOR}.ppo_epochs": at_least(1, "passes over each batch; 0 never updates"),
    f"{_ACTOR}.data_loader_seed": SEED,
    f"{_ACTOR}.grad_clip": GRAD_CLIP,
    f"{_ACTOR}.ulysses_sequence_parallel_size": COUNT,
    **_under(f"{_ACTOR}.optim", _OPTIM),
    **_under(f"{_ACTOR}.fsdp_config", _FSDP),
    **_under("actor_rollout_ref.ref", _LOG_PROB),
    **_under("actor_rollout_ref.ref.fsdp_config", _FSDP),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": COUNT,
    **_under(_ROLLOUT, _SAMPLING),
    f"{_ROLLOUT}.prompt_length": TOKENS,
    f"{_ROLLOUT}.response_length": TOKENS,
    f"{_ROLLOUT}.gpu_memory_utilization": unit("a fraction of device memory", low_open=True),
    f"{_ROLLOUT}.tensor_model_parallel_size": COUNT,
    f"{_ROLLOUT}.data_parallel_size": COUNT,
    f"{_ROLLOUT}.expert_parallel_size": COUNT,
    f"{_ROLLOUT}.pipeline_model_parallel_size": COUNT,
    f"{_ROLLOUT}.max_num_batched_tokens": TOKENS,
    f"{_ROLLOUT}.max_model_len": TOKENS,
    f"{_ROLLOUT}.max_num_seqs": COUNT,
    **_under(_ROLLOUT, _LOG_PROB),
    f"{_ROLLOUT}.over_sample_rate": unit("a fraction of extra prompts"),
    **_under(f"{_ROLLOUT}.val_kwargs", _SAMPLING),
    f"{_ROLLOUT}.multi_turn.max_assistant_turns": COUNT,
    f"{_ROLLOUT}.multi_turn.max_user_turns": COUNT,
    f"{_ROLLOUT}.multi_turn.max_parallel_calls": COUNT,
    f"{_ROLLOUT}.multi_turn.max_tool_response_length": COUNT,
    f"{_ROLLOUT}.multi_turn.num_repeat_rollouts": COUNT,
    f"{_ROLLOUT}.multi_turn.tool_call_timeout": positive("seconds one tool call may take", infinite_ok=True),
    f"{_ROLLOUT}.nnodes": COUNT_OR_ZERO,
    f"{_ROLLOUT}.n_gpus_per_node": COUNT_OR_ZERO,
    f"{_ROLLOUT}.moe_load_balance_metrics_interval": COUNT_OR_ZERO,
    **_under(f"{_ROLLOUT}.disaggregation", {"prefill_replicas": COUNT, "decode_replicas": COUNT,
                                            "decode_tensor_model_parallel_size": COUNT,
                                            "bootstrap_port": Range(low=0, high=65535, why="a TCP port")}),
    f"{_ROLLOUT}.agent.num_workers": COUNT,
    f"{_ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes": COUNT,
    f"{_ROLLOUT}.trace.max_samples_per_step_per_worker": COUNT,
    f"{_ROLLOUT}.prometheus.port": Range(low=0, high=65535, why="a TCP port"),
    **_under(f"{_ROLLOUT}.server", {"timeout": positive("seconds"), "max_attempts": COUNT, "retry_delay": non_negative("seconds"),
                                    "max_connections": COUNT, "max_start_wait_time": positive("seconds")}),
    f"{_ROLLOUT}.seed": SEED,
    f"{_ROLLOUT}.block_size": at_least(1, "tokens per KV-cache block"),
    "critic.rollout_n": COUNT,
    **_under("critic.optim", _OPTIM),
    **_under("critic.model", _LORA),
    **_under("critic.model.fsdp_config", _FSDP),
    "critic.ppo_mini_batch_size": at_least(1, "prompts per optimizer step"),
    "critic.ppo_micro_batch_size": PER_GPU_MICRO,
    "critic.ppo_micro_batch_size_per_gpu": PER_GPU_MICRO,
    "critic.ppo_max_token_len_per_gpu": TOKENS,
    "critic.forward_max_token_len_per_gpu": TOKENS,
    "critic.forward_micro_batch_size": PER_GPU_MICRO,
    "critic.forward_micro_batch_size_per_gpu": PER_GPU_MICRO,
    "critic.ppo_epochs": at_least(1, "passes over each batch; 0 never updates"),
    "critic.data_loader_seed": SEED,
    "critic.cliprange_value": non_negative("the value clip epsilon; inf = no clipping", infinite_ok=True),
    "critic.ulysses_sequence_parallel_size": COUNT,
    "critic.grad_clip": GRAD_CLIP,
    "critic.loss_scale_factor": positive("the divisor of seq-mean-token-sum-norm"),
    "critic.nccl_timeout": at_least(1, "seconds"),
    "critic.model.tiled_mlp.num_shards": COUNT,
    **_under("critic.model.mtp", _MTP),
    "reward_model.n_gpus_per_node": COUNT_OR_ZERO,
    "reward_model.nnodes": COUNT_OR_ZERO,
    **_under("reward_model.model.fsdp_config", _FSDP),
    "reward_model.micro_batch_size": PER_GPU_MICRO,
    "reward_model.micro_batch_size_per_gpu": PER_GPU_MICRO,
    "reward_model.max_length": TOKENS,
    "reward_model.forward_max_token_len_per_gpu": TOKENS,
    "reward_model.sandbox_fusion.max_concurrent": COUNT,
    "reward_model.sandbox_fusion.memory_limit_mb": COUNT,
    "reward_model.ulysses_sequence_parallel_size": COUNT,
    "reward_model.num_workers": at_least(1, "scoring processes; 1 = in the trainer's process"),
    "reward_model.reward_fn_timeout_s": positive("seconds one reward-function call may take; null = no limit"),
    **_under("reward_model.remote", _REMOTE_CLIENT),
    **_under("critic.remote", _REMOTE_CLIENT),
    "reward_model.nccl_timeout": at_least(1, "seconds"),
    "reward_model.overlong_buffer.len": COUNT_OR_ZERO,
    "reward_model.overlong_buffer.penalty_factor": non_negative("the overlong penalty's weight (DAPO)"),
    "algorithm.gamma": unit("a discount factor"),
    "algorithm.lam": unit("the GAE lambda (Schulman et al. 2016)"),
    "algorithm.kl_ctrl.kl_coef": non_negative("a KL weight; a negative one rewards drifting from the reference"),
    "algorithm.kl_ctrl.horizon": COUNT,
    "algorithm.kl_ctrl.target_kl": positive("the adaptive controller divides by it"),
    "algorithm.pf_ppo.weight_pow": ANY_FLOAT,
    "algorithm.filter_groups.max_num_gen_batches": ANY_INT,  # <= 0 = unlimited
    "algorithm.filter_groups.max_inflight_gen_batches": COUNT,
    "distillation.nnodes": COUNT_OR_ZERO,
    "distillation.n_gpus_per_node": COUNT_OR_ZERO,
    **_under("distillation.distillation_loss", {
        "topk": COUNT, "chunked_topk_chunk_size": COUNT, "distillation_loss_coef": non_negative("a loss weight"),
        "loss_max_clamp": positive("the per-token loss cap"), "log_prob_min_clamp": ANY_FLOAT, **_CLIPS}),
    # a number here; a "lower_upper" string is checked by the trainer's parser (trainer/correction.py)
    "algorithm.rollout_correction.rollout_is_threshold": positive("the IS weight cap; inf = no cap", infinite_ok=True),
    "algorithm.rollout_correction.rollout_rs_threshold": positive("the rejection threshold", infinite_ok=True),
    "trainer.v1.colocate_async.num_warmup_batches": COUNT_OR_ZERO,
    "trainer.v1.separate_async.num_warmup_batches": COUNT_OR_ZERO,
    "trainer.v1.separate_async.parameter_sync_step": COUNT,
    "trainer.v1.sampler.max_off_policy_threshold": at_least(1, "policy versions a trajectory may span; 1 = on-policy"),
    **_under("trainer.v1.separate_async.hybrid_rollout", {
        "switch_threshold_ratio": unit("a fraction of the train batch", low_open=True),
        "switch_threshold_step_up": unit("a change of that fraction"),
        "switch_threshold_step_down": unit("a change of that fraction"),
        "switch_threshold_release_steps": COUNT, "switch_cost_window_size": COUNT}),
    "trainer.total_epochs": at_least(1, "passes over the training set"),
    "trainer.total_training_steps": at_least(1, "steps; null = epochs x batches"),
    "trainer.log_val_generations": COUNT_OR_ZERO,
    "trainer.nnodes": COUNT,
    "trainer.n_gpus_per_node": COUNT,
    "trainer.save_freq": at_least(-1, "steps between saves; -1 or 0 = never"),
    "trainer.esi_redundant_time": non_negative("seconds"),
    "trainer.test_freq": at_least(-1, "steps between validations; -1 or 0 = never"),
    "trainer.critic_warmup": COUNT_OR_ZERO,
    "trainer.max_actor_ckpt_to_keep": at_least(0, "checkpoints kept; null or 0 = all (as verl)"),
    "trainer.max_critic_ckpt_to_keep": at_least(0, "checkpoints kept; null or 0 = all (as verl)"),
    "trainer.ray_wait_register_center_timeout": at_least(1, "seconds"),
    "trainer.max_consecutive_nonfinite_steps": at_least(0, "steps in a row that skipped optimizer steps for "
                                                           "non-finite values before the run stops; 0 or null = never"),
    "trainer.seed": SEED,
}

# Lists of numbers: every element must lie in the range.
LIST_RANGES: dict[str, Range] = {
    f"{prefix}.optim.betas": Range(low=0, high=1, high_open=True, why="Adam's moment decay rates")
    for prefix in (_ACTOR, "critic")
} | {"algorithm.gdpo_reward_weights": ANY_FLOAT}


def range_problems(cfg: Any, *, unusable_only: bool = False) -> list[str]:
    """One message per numeric key whose value is outside its range (null is left to the type check).
    `unusable_only`: just the values no other rule can compute with (NaN, inf, integers beyond 2^32)."""
    return [message for _, value, message in _findings(cfg) if not unusable_only or _unusable(value)]


def _findings(cfg: Any) -> list[tuple[str, Any, str]]:
    """(key, value, message) for every value outside its range."""
    tree = config_tree(cfg)
    found = []
    for key, rule in RANGES.items():
        value = get_in(tree, key)
        if value is None or isinstance(value, bool | str) or rule.allows(value) or _follows_bad_key(key, value, tree):
            continue
        found.append((key, value, _message(key, value, rule)))
    for key, rule in LIST_RANGES.items():
        values = get_in(tree, key) or []
        bad = [v for v in values if not rule.allows(v)]
        if bad:
            found.append((key, bad[0], f"{key}={values!r}: every element must be {rule.rule()} ({rule.why}); "
                                       f"{bad[0]!r} is not; set {key}={_default(key)!r} (the default)"))
    return found


def _unusable(value: float) -> bool:
    return (isinstance(value, float) and not math.isfinite(value)) or (isinstance(value, int) and abs(value) > SEED_MAX)


def merged_range_problems(cfg: Any, others: list[str]) -> list[str]:
    """The range messages, then `others` (the other rules' messages), leaving out a range message for a key
    that another rule already names with its value (`key (value)`): that rule's message is the specific one."""
    kept = [message for key, value, message in _findings(cfg)
            if not any(f"{key} ({value})" in other or f"{key}={value!r}" in other for other in others)]
    return kept + cross_range_problems(cfg) + others


def _message(key: str, value: float, rule: Range) -> str:
    fix = _default(key)
    hint = f"set {key}={fix!r} (the default)" if fix is not None and rule.allows(fix) else "set a value in that range"
    if rule.high == INT_MAX and value > INT_MAX:
        return f"{key}={value!r} is out of range: it must be <= 2^31-1 (no real setting is larger); {hint}"
    why = f": {rule.why}" if rule.why else ""
    return f"{key}={value!r} is out of range: it must be {rule.rule()}{why}; {hint}"


def _default(key: str) -> Any:
    from hybridrl.config.index import default_tree

    value = get_in(default_tree(), key)
    return None if isinstance(value, str) else value  # a `${...}` default follows another key


def _follows_bad_key(key: str, value: Any, tree: dict[str, Any]) -> bool:
    """True when `key` took its value from another key by its `${...}` default and that key already gets
    the message (one message per value the user wrote)."""
    ref = schema_index()[key].ref
    if not ref or not ref.startswith("${") or ":" in ref:
        return False
    source = ref[2:-1]
    if source.startswith("."):
        source = key.rsplit(".", 1)[0] + source
    rule = RANGES.get(source)
    return rule is not None and not rule.allows(value) and _same(get_in(tree, source), value)


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def cross_range_problems(cfg: Any) -> list[str]:
    """Ranges that depend on another key."""
    problems = []
    gen, train = cfg.data.gen_batch_size, cfg.data.train_batch_size
    if gen is not None and gen < train and not cfg.algorithm.filter_groups.enable:
        # With dynamic sampling any size works: a step takes as many rounds of gen_batch_size prompts as it needs.
        problems.append(f"data.gen_batch_size ({gen}) must be >= data.train_batch_size ({train}) or null: it counts the "
                        f"prompts generated per step, of which train_batch_size are trained on (any size works with "
                        f"DAPO dynamic sampling, algorithm.filter_groups.enable=true); set data.gen_batch_size=null "
                        f"(= data.train_batch_size)")
    elif gen is not None and gen > train and not cfg.algorithm.filter_groups.enable:
        # verl's loader yields gen_batch_size prompts; without dynamic sampling every one of them is trained on,
        # so the batch rules (checked against train_batch_size) would not describe the step.
        problems.append(f"data.gen_batch_size ({gen}) > data.train_batch_size ({train}) only has a meaning with DAPO "
                        f"dynamic sampling (algorithm.filter_groups.enable=true): without it every generated prompt "
                        f"is trained on; set data.gen_batch_size=null, or data.train_batch_size={gen}")
    loss = cfg.actor_rollout_ref.actor.policy_loss
    if loss.clip_cov_lb > loss.clip_cov_ub:
        key = "actor_rollout_ref.actor.policy_loss.clip_cov"
        problems.append(f"{key}_lb ({loss.clip_cov_lb}) must be <= {key}_ub ({loss.clip_cov_ub}): they bound the "
                        f"covariance band whose tokens are clipped; swap them")
    return problems
