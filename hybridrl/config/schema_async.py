"""Schema of `trainer.v1.*` (verl's V1 trainer, August-2026 tree) and `algorithm.rollout_correction.*`.

Defaults and names are verl's (verl/trainer/config/ppo_trainer.yaml, algorithm/rollout_correction.yaml).
What each mode does in hybridrl: docs/design.md, "Asynchronous training".
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting

TRAINER_MODES = ("sync", "colocate_async", "separate_async")
OFF_POLICY_STRATEGIES = ("drop", "wait")


@dataclass
class RolloutCorrectionConfig:
    """Correction of the mismatch between the rollout engine's and the trainer's probabilities (verl HEAD)."""

    rollout_is: str | None = setting(
        None, "Importance weights π_train/π_rollout applied to the policy loss: token | sequence (verl), geometric "
              "(verl 0.6.0's per-token geometric mean); null = off (rollout_corr/* metrics are logged anyway).")
    rollout_is_threshold: float | str = setting(
        2.0, "A number C truncates the weights at C (TIS); a 'lower_upper' string, e.g. '0.5_5.0', zeroes weights "
             "outside [lower, upper] (IcePop).")
    rollout_rs: str | None = setting(
        None, "Rejection sampling: comma-separated options token_k1..k3, seq_sum_k1..k3, seq_mean_k1..k3, "
              "seq_max_k2/k3; rejected tokens leave the response mask; null = off.")
    rollout_rs_threshold: float | str | None = setting(
        None, "Rejection bounds: one for all options or one per option, comma-separated; k1 options take "
              "'lower_upper' ratio bounds (one number u means 1/u_u).")
    bypass_mode: bool = setting(
        False, "true: π_old := π_rollout (no old_log_prob pass; the weights come from π_θ inside the loss); false: "
               "decoupled, weights π_old/π_rollout from the old_log_prob pass.")
    loss_type: str = setting("ppo_clip", "Loss in bypass mode: ppo_clip (PPO on π_θ/π_rollout) or reinforce "
                                         "(−A·w·log π_θ with the IS weights).", choices=("ppo_clip", "reinforce"))
    rollout_is_batch_normalize: bool = setting(False, "Divide the IS weights by their batch mean (mean 1).")


@dataclass
class ColocateAsyncConfig:
    """`colocate_async`: generation and training take turns on the same devices (the hybrid engine)."""

    num_warmup_batches: int = setting(1, "Prompt batches queued beyond the one trained, so the engine keeps "
                                         "generating the next step's groups while this step's tail is cut.")


@dataclass
class HybridRolloutSwitchConfig:
    """verl's step switching for `separate_async` (lend idle trainer devices to the rollout); not implemented."""

    enable_switch: bool = setting(False, "Let the trainer's devices generate while they wait; refused when true.")
    switch_threshold_ratio: float = setting(0.4, "Fraction of the train batch ready before the devices return.")
    adaptive_switch_threshold: bool = setting(True, "Adapt the threshold to the trainer's idle time.")
    switch_threshold_step_up: float = setting(0.05, "Ratio increase after sustained idle.")
    switch_threshold_step_down: float = setting(0.03, "Ratio decrease after a sustained calm.")
    switch_threshold_release_steps: int = setting(2, "Consecutive idle or calm steps before the ratio moves.")
    switch_cost_window_size: int = setting(3, "Recent switch costs averaged by the decision.")


@dataclass
class SeparateAsyncConfig:
    """`separate_async`: the rollout generates on devices of its own while the actor trains."""

    num_warmup_batches: int = setting(1, "Prompt batches queued beyond the one trained (the next step's work).")
    parameter_sync_step: int = setting(
        4, "Optimizer steps (PPO mini-batches) per weight sync; must equal data.train_batch_size / "
           "actor.ppo_mini_batch_size (verl's invariant): the step trains the whole batch, then syncs.")
    hybrid_rollout: HybridRolloutSwitchConfig = section(HybridRolloutSwitchConfig, "Step switching (refused).")


@dataclass
class CustomSamplerConfig:
    """A user's replay-buffer class (verl); not implemented."""

    path: str | None = setting(None, "File of a custom sampler class; refused when set.")
    name: str | None = setting(None, "Its class name.")


@dataclass
class SamplerConfig:
    """Off-policy control of the asynchronous modes."""

    max_off_policy_threshold: int = setting(
        8, "Policy versions a trajectory may span from its first token to the update that trains on it (1 = "
           "fully on-policy, which makes the async modes the sync trainer); also bounds the groups in flight: at "
           "most threshold x train_batch_size started and not yet trained (AReaL's admission control).")
    max_off_policy_strategy: str = setting(
        "drop", "What still exceeds the threshold: drop (the group is evicted as soon as it can no longer train in "
                "time, cancelled in the engine if still generating, and a new prompt takes its place) or wait (the "
                "step waits for a group about to exceed it, so it is trained, never dropped).",
        choices=OFF_POLICY_STRATEGIES)
    sync_refill_failed_groups: bool = setting(False, "Either value: no group of hybridrl's rollout fails without "
                                                     "raising (verl's sync trainer refills failed agent groups).")
    custom_sampler: CustomSamplerConfig = section(CustomSamplerConfig, "A custom sampler class (refused).")
    sampler_kwargs: dict = setting({}, "Arguments of a custom sampler (open dict; unused without one).")


@dataclass
class TrainerV1Config:
    """verl's V1 trainer modes: synchronous, or asynchronous with colocated or separate rollout devices."""

    trainer_mode: str = setting(
        "sync", "sync | colocate_async (one device is enough: cut the long tail, resume it after the update) | "
                "separate_async (the rollout on its own devices generates step k+1 while step k trains).",
        choices=TRAINER_MODES)
    sync: dict = setting({}, "Options of the sync mode (open dict; verl has none).")
    colocate_async: ColocateAsyncConfig = section(ColocateAsyncConfig, "colocate_async options.")
    separate_async: SeparateAsyncConfig = section(SeparateAsyncConfig, "separate_async options.")
    sampler: SamplerConfig = section(SamplerConfig, "Off-policy control of the asynchronous modes.")
