"""Steps whose optimizer steps were skipped for non-finite values: a warning each, and an error after a run of them.

An optimizer step whose gradient norm is not finite is skipped (`TrainState.step`), so one bad mini-batch costs
one step, not the weights. But a cause that persists (a NaN setting, a reward function returning inf, weights
blown up by the learning rate) makes every step skip while the run "succeeds" and learns nothing. A step counts
when any of its actor or critic optimizer steps was skipped (`<role>/num_skipped_steps` > 0); each such step is
logged with its first non-finite quantity, and `trainer.max_consecutive_nonfinite_steps` of them in a row stop
the run with `NonFiniteTrainingError` (0 or null: never).

The first non-finite quantity is found along the step's chain, data first, from the step's metrics:
`training/nonfinite/<key>` (non-finite values among the response tokens of the batch's scores, rewards, log-probs,
values, advantages and returns: `nonfinite_batch_metrics`), then the update's own (`<role>/nonfinite/<quantity>`,
workers/nonfinite.py: its forward, each loss term, the total loss, else the gradient). Each quantity names the
keys that usually cause it, with their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from hybridrl.config.index import config_value
from hybridrl.config.schema import HybridRLConfig
from hybridrl.logging.log import get_logger
from hybridrl.utils.batch import Batch

log = get_logger("hybridrl.trainer")
LIMIT_KEY = "trainer.max_consecutive_nonfinite_steps"
BATCH_PREFIX = "training/nonfinite/"
# Batch tensors of the chain, in the order each feeds the next: scores -> rewards -> log-probs -> values -> advantages.
BATCH_KEYS = ("token_level_scores", "token_level_rewards", "rollout_log_probs", "old_log_probs", "sum_pi_squared",
              "ref_log_prob", "values", "advantages", "returns")


class NonFiniteTrainingError(RuntimeError):
    """Several steps in a row skipped optimizer steps for non-finite values; the message names the first one."""


@dataclass(frozen=True)
class Quantity:
    """One link of the chain: the metric that flags it, what it is, what usually makes it non-finite, the keys."""

    metric: str
    what: str
    causes: str
    keys: tuple[str, ...]


_ACTOR_FORWARD = ("weights blown up by too large a learning rate, or logits / temperature overflowing",
                  ("actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.rollout.temperature",
                   "actor_rollout_ref.actor.fsdp_config.model_dtype"))
CHAIN: tuple[Quantity, ...] = (
    Quantity(BATCH_PREFIX + "token_level_scores", "the scores (token_level_scores: what the reward function or "
             "reward model returned)", "a reward function returning NaN or inf, or a value beyond float32's "
             "±3.4e38 (stored as inf)", ("custom_reward_function.path", "custom_reward_function.name",
                                         "reward_model.enable")),
    Quantity(BATCH_PREFIX + "token_level_rewards", "the rewards after the KL penalty (token_level_rewards)",
             "a non-finite KL between actor and reference log-probs, or coefficient",
             ("algorithm.use_kl_in_reward", "algorithm.kl_penalty", "algorithm.kl_ctrl.kl_coef")),
    Quantity(BATCH_PREFIX + "rollout_log_probs", "the rollout engine's log-probs (rollout_log_probs)",
             "logits / temperature overflowing, or weights blown up by too large a learning rate",
             ("actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.dtype",
              "actor_rollout_ref.actor.optim.lr")),
    Quantity(BATCH_PREFIX + "old_log_probs", "the actor's log-probs of the sampled tokens (old_log_probs)",
             "a sampled token the actor gives probability 0, or " + _ACTOR_FORWARD[0], _ACTOR_FORWARD[1]),
    Quantity(BATCH_PREFIX + "sum_pi_squared", "the actor's sum(pi^2) per token (sum_pi_squared, the optimal token "
             "baseline's)", _ACTOR_FORWARD[0], _ACTOR_FORWARD[1]),
    Quantity(BATCH_PREFIX + "ref_log_prob", "the reference's log-probs (ref_log_prob)",
             "logits / temperature overflowing in the reference's dtype",
             ("actor_rollout_ref.rollout.temperature", "actor_rollout_ref.ref.fsdp_config.model_dtype")),
    Quantity(BATCH_PREFIX + "values", "the critic's values", "a critic blown up by too large a learning rate",
             ("critic.optim.lr", "critic.grad_clip", "critic.model.fsdp_config.model_dtype")),
    Quantity(BATCH_PREFIX + "advantages", "the advantages", "a non-finite estimator setting",
             ("algorithm.adv_estimator", "algorithm.gamma", "algorithm.lam", "algorithm.norm_adv_by_std_in_grpo")),
    Quantity(BATCH_PREFIX + "returns", "the returns", "a non-finite estimator setting",
             ("algorithm.adv_estimator", "algorithm.gamma", "algorithm.lam")),
    Quantity("actor/nonfinite/log_prob", "the log-probs of the actor's update forward", *_ACTOR_FORWARD),
    Quantity("actor/nonfinite/entropy", "the entropy of the actor's update forward", *_ACTOR_FORWARD),
    Quantity("actor/nonfinite/pg_loss", "the policy loss (actor/pg_loss) of finite log-probs and advantages",
             "the ratio exp(log_prob - old_log_prob) overflowing on far off-policy data, or a loss setting",
             ("actor_rollout_ref.actor.clip_ratio_c", "actor_rollout_ref.actor.policy_loss.loss_mode",
              "actor_rollout_ref.actor.loss_scale_factor", "actor_rollout_ref.actor.ppo_epochs")),
    Quantity("actor/nonfinite/kl_loss", "the KL loss (actor/kl_loss)", "an unclamped KL estimator on a log-prob "
             "of -inf", ("actor_rollout_ref.actor.kl_loss_type", "actor_rollout_ref.actor.kl_loss_coef")),
    Quantity("actor/nonfinite/loss", "the actor's total loss (pg_loss - entropy_coeff x entropy + kl_loss_coef x "
             "kl_loss) of finite terms", "a non-finite coefficient",
             ("actor_rollout_ref.actor.entropy_coeff", "actor_rollout_ref.actor.kl_loss_coef",
              "actor_rollout_ref.actor.loss_scale_factor")),
    Quantity("actor/nonfinite/grad_norm", "the actor's gradient (its loss was finite)",
             "an overflow in the backward pass (low precision), or weights blown up by the learning rate",
             ("actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.grad_clip",
              "actor_rollout_ref.actor.fsdp_config.model_dtype")),
    Quantity("critic/nonfinite/vpreds", "the values of the critic's update forward",
             "a critic blown up by too large a learning rate",
             ("critic.optim.lr", "critic.model.fsdp_config.model_dtype")),
    Quantity("critic/nonfinite/vf_loss", "the value loss (critic/vf_loss) of finite values",
             "returns far from the values (squared), or a loss setting", ("critic.cliprange_value",
                                                                        "critic.loss_agg_mode")),
    Quantity("critic/nonfinite/grad_norm", "the critic's gradient (its loss was finite)",
             "an overflow in the backward pass (low precision), or weights blown up by the learning rate",
             ("critic.optim.lr", "critic.grad_clip", "critic.model.fsdp_config.model_dtype")),
)


def nonfinite_batch_metrics(batch: Batch) -> dict[str, float]:
    """`training/nonfinite/<key>`: how many of the response tokens of each chain tensor (B, R) of `batch` are not
    finite; only keys with any, so a healthy run logs none."""
    mask = batch["response_mask"].bool()
    counts = {}
    for key in BATCH_KEYS:
        tensor = batch.get(key)
        if isinstance(tensor, torch.Tensor) and tensor.shape == mask.shape and tensor.is_floating_point():
            bad = int((~torch.isfinite(tensor) & mask).sum())
            if bad:
                counts[BATCH_PREFIX + key] = float(bad)
    return counts


def first_nonfinite(metrics: Mapping[str, float]) -> Quantity | None:
    """The earliest quantity of the chain that the step's metrics flag."""
    return next((q for q in CHAIN if metrics.get(q.metric, 0.0) > 0), None)


class NonFiniteGuard:
    """Counts consecutive steps with skipped optimizer steps; warns on each, raises after the configured number."""

    def __init__(self, cfg: HybridRLConfig) -> None:
        self.cfg = cfg
        self.limit = cfg.trainer.max_consecutive_nonfinite_steps or 0
        self.steps: list[int] = []  # the current run of consecutive steps with skipped optimizer steps

    def check(self, metrics: Mapping[str, float], step: int) -> None:
        """After step `step` is logged: NonFiniteTrainingError once `limit` steps in a row skipped."""
        skipped = {role: metrics.get(f"{role}/num_skipped_steps", 0.0) for role in ("actor", "critic")}
        if not any(count > 0 for count in skipped.values()):
            self.steps.clear()
            return
        self.steps.append(step)
        skips = " and ".join(f"{count:g} {role}" for role, count in skipped.items() if count > 0)
        cause = self._cause(metrics)
        in_a_row = len(self.steps)
        if self.limit and in_a_row >= self.limit:
            raise NonFiniteTrainingError(
                f"{in_a_row} steps in a row (steps {self.steps[0]}-{step}) skipped optimizer steps for non-finite "
                f"values ({LIMIT_KEY}={self.limit}); step {step} skipped {skips} optimizer step(s). {cause}. Fix the "
                f"cause; or raise {LIMIT_KEY} (0 = never stop) to train through it")
        stop = f"the run stops after {self.limit} in a row ({LIMIT_KEY})" if self.limit else f"{LIMIT_KEY}=0: it goes on"
        log.warning(f"step {step}: {skips} optimizer step(s) skipped for non-finite values "
                f"({in_a_row} such step(s) in a row; {stop}). {cause}")

    def _cause(self, metrics: Mapping[str, float]) -> str:
        quantity = first_nonfinite(metrics)
        if quantity is None:
            return "No quantity of the chain was flagged non-finite"
        count = metrics[quantity.metric]
        where = (f"{count:g} non-finite value(s) among the response tokens" if quantity.metric.startswith(BATCH_PREFIX)
                 else f"first in {count:g} skipped optimizer step(s), a mean over the ranks")
        settings = ", ".join(f"{key}={_value(self.cfg, key)}" for key in quantity.keys)
        return (f"The first non-finite quantity: {quantity.what}, {where} ({quantity.metric}). Usually "
                f"{quantity.causes}; look at {settings}")


def _value(cfg: HybridRLConfig, key: str) -> object:
    try:
        return config_value(cfg, key)
    except AttributeError:  # a key of another config generation
        return "?"
