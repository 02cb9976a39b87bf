"""The actor role: the policy, its optimizer and LR schedule; log-probs and the PPO update."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import torch

from hybridrl.algorithms import ActorLossSettings, PolicyLossSettings, agg_loss, get_policy_loss_fn, kl_penalty
from hybridrl.algorithms.agreement import rollout_agreement_metrics
from hybridrl.algorithms.bypass_loss import bypass_policy_loss
from hybridrl.algorithms.policy_loss import policy_agg_mode
from hybridrl.algorithms.rollout_correction import RolloutCorrection
from hybridrl.config.batch_sizes import BatchSizes
from hybridrl.config.schema import HybridRLConfig
from hybridrl.models.hf import load_causal_lm
from hybridrl.utils.batch import Batch
from hybridrl.utils.nsight import nvtx_range
from hybridrl.workers.actor_distillation import LOSS_KEY as DISTILLATION_LOSS_KEY
from hybridrl.workers.actor_distillation import ActorDistillation
from hybridrl.workers.forward import batched_response_stats, response_log_probs
from hybridrl.workers.loss_scope import MicroBatchWeights
from hybridrl.workers.micro_batches import MicroBatchPlan
from hybridrl.workers.nonfinite import NonFiniteTrace, SkippedSteps
from hybridrl.workers.trainable import RoleSpec, TrainState, build_trainable
from hybridrl.workers.update_correction import UpdateCorrection, UpdateMode, correction_settings
from hybridrl.workers.update_metrics import as_metric, means

UPDATE_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask",
               "old_log_probs", "advantages")


class ActorWorker(TrainState):
    def __init__(self, cfg: HybridRLConfig, sizes: BatchSizes, device: torch.device, total_training_steps: int):
        self.cfg = cfg
        self.actor_cfg = cfg.actor_rollout_ref.actor
        self.sizes = sizes
        self.device = device
        model_cfg = cfg.actor_rollout_ref.model
        self.lora = model_cfg.lora_rank > 0
        self._base_synced = False  # LoRA: the rollout got the full weights once; afterwards only deltas

        def load(master: torch.dtype, on: torch.device) -> torch.nn.Module:
            model = load_causal_lm(model_cfg.path, dtype=master, override_config=model_cfg.override_config,
                                   trust_remote_code=model_cfg.trust_remote_code,
                                   hf_config_path=model_cfg.hf_config_path,
                                   tokenizer_path=model_cfg.tokenizer_path, use_shm=model_cfg.use_shm,
                                   fp32_residual=model_cfg.fp32_residual_stream,
                                   batch_invariant=model_cfg.batch_invariant).to(on)
            return _apply_lora(model, model_cfg) if self.lora else model  # LoRA's init draws on its device's RNG

        super().__init__(build_trainable(RoleSpec.actor(cfg), device, load, total_training_steps))
        self.policy_loss_fn = get_policy_loss_fn(self.actor_cfg.policy_loss.loss_mode)
        self.policy_agg_mode = policy_agg_mode(self.actor_cfg.policy_loss.loss_mode, self.actor_cfg.loss_agg_mode)
        self.loss_settings = _loss_settings(self.actor_cfg)
        self.distillation = ActorDistillation(cfg, self.loss_settings) if cfg.distillation.enabled else None
        self.correction = UpdateCorrection(correction_settings(cfg.algorithm.rollout_correction))
        self.remove_padding = self.actor_cfg.use_remove_padding
        self.log_prob_plan = MicroBatchPlan.for_phase(cfg, "old_log_prob", sizes.log_prob_micro)
        self.update_plan = MicroBatchPlan.for_phase(cfg, "update_actor", sizes.ppo_micro)

    # ------------------------------------------------------------ log-probs
    def compute_log_prob(self, batch: Batch) -> Batch:
        """old_log_probs (B, R) and entropys (B, R) with the current policy, and sum_pi_squared (B, R), Σ_v π(v)²
        of each token's distribution under logits / temperature, with actor.calculate_sum_pi_squared (verl's
        compute_log_prob output for the optimal token baseline)."""
        self.model.eval()
        with_sum_pi_squared = self.actor_cfg.calculate_sum_pi_squared
        with self.offloader.for_compute(), self.parallel.autocast():
            micro_batches = self.log_prob_plan.split(batch.to(self.device), self.parallel.max_over_ranks)
            stats = batched_response_stats(self.model, micro_batches, batch.meta["temperature"], compute_entropy=True,
                                           compute_sum_pi_squared=with_sum_pi_squared,
                                           remove_padding=self.remove_padding)
        assert stats.entropy is not None
        out = Batch({"old_log_probs": stats.log_probs.cpu(), "entropys": stats.entropy.cpu()})
        if stats.sum_pi_squared is not None:
            out["sum_pi_squared"] = stats.sum_pi_squared.cpu()
        return out

    # --------------------------------------------------------------- update
    def update_actor(self, batch: Batch) -> dict[str, float]:
        """ppo_epochs × mini-batches of `ppo_mini_batch_size × n` rows, one optimizer step per mini-batch.

        A batch without `old_log_probs` is the on-policy shortcut (trainer's `takes_old_log_probs_from_update`):
        one epoch over one mini-batch, old log-probs = the forward's own (detached); actor/entropy and the
        rollout agreement metrics then come from that forward, as in bypass mode (update_correction.py).
        `rollout_is_weights`, when present, multiply the policy loss (decoupled rollout correction).
        """
        self.model.train()
        on_policy = "old_log_probs" not in batch
        mode = self.correction.mode(on_policy, "rollout_log_probs" in batch)
        keys = [k for k in UPDATE_KEYS if not (on_policy and k == "old_log_probs")]
        keys += (["ref_log_prob"] if self.actor_cfg.use_kl_loss else []) + (
            ["rollout_log_probs"] if on_policy and "rollout_log_probs" in batch else []) + (
            ["rollout_is_weights"] if "rollout_is_weights" in batch else []) + (
            list(self.distillation.keys) if self.distillation is not None else [])
        data = batch.select(keys).to(self.device)
        metrics: dict[str, list[torch.Tensor | float]] = defaultdict(list)
        skipped = SkippedSteps("actor")
        with self.offloader.for_update():
            for epoch in range(self.actor_cfg.ppo_epochs):
                minis = self._mini_batches(data, epoch)
                if on_policy:
                    _check_on_policy(self.actor_cfg.ppo_epochs, len(minis))
                for mini in minis:
                    self._update_mini_batch(mini, metrics, skipped, mode)
        skipped.step_scheduler(self.lr_scheduler)
        out = means(metrics) | skipped.metrics()
        if self.distillation is not None:
            out |= self.distillation.pop_extremes()  # actor/distillation/*_min, *_max
        out["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    def _mini_batches(self, data: Batch, epoch: int) -> list[Batch]:
        if self.actor_cfg.shuffle:
            gen = torch.Generator().manual_seed(self.actor_cfg.data_loader_seed + epoch)
            data = data.index(torch.randperm(len(data), generator=gen))
        return data.split(self.sizes.ppo_mini)

    def _update_mini_batch(self, mini: Batch, metrics: dict[str, list[torch.Tensor | float]], skipped: SkippedSteps,
                           mode: UpdateMode) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        parts = self.update_plan.split(mini, self.parallel.max_over_ranks).parts
        weights = MicroBatchWeights(self.actor_cfg.loss_agg_scope, mini, self.sequence_parallel)
        forwards = []  # no old_log_prob pass: (log_prob, entropy) of each micro-batch, detached, for its metrics
        mini_metrics: dict[str, list[torch.Tensor | float]] = defaultdict(list)
        trace = NonFiniteTrace()  # which quantity went non-finite first, should the step be skipped
        for index, micro in enumerate(parts):
            last = index == len(parts) - 1  # one gradient reduce per mini-batch, in its last backward
            with self.parallel.backward_sync(last), self.saved_activations():  # enable_activation_offload
                with nvtx_range("actor/forward"):  # global_profiler.tool=nsys only (utils/nsight.py)
                    loss, micro_parts, forward = self._micro_loss(micro, weights, trace, mode)
                with nvtx_range("actor/backward"):
                    loss.backward()
            if mode.reports_forward:
                forwards.append(forward)
            for key, value in micro_parts.items():
                mini_metrics[key].append(value)
        for key, values in mini_metrics.items():  # weighted parts: their sum is the mini-batch's value
            metrics[key].append(sum(values) * weights.rescale(self._metric_agg_mode(key)))
        if self.actor_cfg.use_kl_loss:
            metrics["actor/kl_coef"].append(self.actor_cfg.kl_loss_coef)
        if mode.reports_forward:
            for key, value in self._forward_metrics(parts, forwards, weights).items():
                metrics[key].append(value)
        grad_norm = self.step(self.actor_cfg.grad_clip, weights.rescale(self.actor_cfg.loss_agg_mode))
        skipped.record(grad_norm, trace)
        metrics["actor/grad_norm"].append(as_metric(grad_norm))

    def _metric_agg_mode(self, key: str) -> str:
        """The mean a weighted metric part follows: the losses their modes, the policy loss's others token means."""
        if key == "actor/pg_loss":
            return self.policy_agg_mode
        if key == DISTILLATION_LOSS_KEY:
            return self.distillation.agg_mode if self.distillation is not None else "token-mean"
        return self.actor_cfg.loss_agg_mode if key in ("actor/entropy_loss", "actor/kl_loss") else "token-mean"

    def _micro_loss(self, micro: Batch, weights: MicroBatchWeights, trace: NonFiniteTrace, mode: UpdateMode):
        """(weighted loss, weighted metric parts, (log_prob, entropy) detached) of one micro-batch. Every loss
        term and metric is weighted by the micro-batch's share of the mini-batch (`MicroBatchWeights`; the
        clip fractions and ppo_kl are token means), so summed over micro-batches they are the mini-batch's."""
        cfg = self.actor_cfg
        need_entropy = cfg.entropy_coeff != 0 or mode.reports_forward  # no pass: actor/entropy comes from here
        with self.parallel.autocast():
            if self.distillation is not None:  # with the top-k modes, also the log-probs at the teacher's top-k
                log_prob, entropy, student = self.distillation.forward(self.model, micro, need_entropy,
                                                                       self.remove_padding)
            else:
                log_prob, entropy = response_log_probs(self.model, micro, micro.meta["temperature"], need_entropy,
                                                       self.remove_padding)
        pg_loss, pg_metrics, mask = self._policy_loss(micro, log_prob, mode, weights)
        trace.note("log_prob", log_prob, mask)  # over the tokens the loss uses (rejection sampling may drop some)
        if entropy is not None:
            trace.note("entropy", entropy, mask)
        trace.note("pg_loss", pg_loss)
        loss = pg_loss * weights(mask, self.policy_agg_mode)
        metrics = {"actor/pg_loss": as_metric(loss)}
        token_weight = weights(mask, "token-mean")
        metrics.update({key: as_metric(value * token_weight) for key, value in pg_metrics.items()})
        weight = weights(mask, cfg.loss_agg_mode)
        if cfg.entropy_coeff != 0:
            entropy_agg = agg_loss(entropy, mask, cfg.loss_agg_mode, cfg.loss_scale_factor) * weight
            loss = loss - cfg.entropy_coeff * entropy_agg
            metrics["actor/entropy_loss"] = as_metric(entropy_agg)
        if cfg.use_kl_loss:
            kld = kl_penalty(log_prob, micro["ref_log_prob"], cfg.kl_loss_type)
            kl_loss = agg_loss(kld, mask, cfg.loss_agg_mode, cfg.loss_scale_factor) * weight
            loss = loss + cfg.kl_loss_coef * kl_loss
            metrics["actor/kl_loss"] = as_metric(kl_loss)
            trace.note("kl_loss", kl_loss)
        if self.distillation is not None:
            old_log_prob = log_prob.detach() if mode.on_policy else micro["old_log_probs"]
            loss = self.distillation.add_loss(loss, micro, student, old_log_prob, mask, weights, metrics)
            trace.note("distillation_loss", metrics[DISTILLATION_LOSS_KEY])
        trace.note("loss", loss)  # with the coefficients (entropy_coeff, kl_loss_coef) and the micro-batch weight
        return loss, metrics, (log_prob.detach(), entropy.detach() if entropy is not None else None)

    def _policy_loss(self, micro: Batch, log_prob: torch.Tensor, mode: UpdateMode, weights: MicroBatchWeights
                     ) -> tuple[torch.Tensor, Mapping[str, torch.Tensor | float], torch.Tensor]:
        """(policy loss, its metrics, the mask every term of this micro-batch uses): the configured loss with the
        batch's IS weights (decoupled, after the pass) or ones computed here (update_correction.py)."""
        cfg, mask = self.actor_cfg, micro["response_mask"]
        old_log_prob = log_prob.detach() if mode.on_policy else micro["old_log_probs"]
        is_weights = micro.get("rollout_is_weights")
        if mode.corrects:
            rollout_log_prob = self.correction.rollout_log_probs(micro)
            is_weights, mask = self.correction.weights_and_mask(log_prob, rollout_log_prob, mask)
            if self.correction.rejects:
                weights.observe(mask)
            if self.correction.bypass:
                bypass_loss, bypass_metrics = bypass_policy_loss(
                    rollout_log_prob, log_prob, micro["advantages"], RolloutCorrection(is_weights, mask, {}),
                    self.correction.settings.loss_type, cfg.loss_agg_mode, self.loss_settings)
                return bypass_loss, bypass_metrics, mask
        extra = {"rollout_is_weights": is_weights} if is_weights is not None else {}
        pg_loss, pg_metrics = self.policy_loss_fn(old_log_prob, log_prob, micro["advantages"], mask,
                                                  loss_agg_mode=cfg.loss_agg_mode, config=self.loss_settings, **extra)
        return pg_loss, pg_metrics, mask

    def _forward_metrics(self, parts: list[Batch], forwards: list, weights: MicroBatchWeights
                         ) -> dict[str, torch.Tensor | float]:
        """What the skipped old_log_prob pass would report: actor/entropy (over the whole mini-batch, like the
        loss), training/rollout_probs_diff_*, and the rollout_corr/* metrics of π_train (this forward: π_old in
        the shortcut, π_θ in bypass mode) against π_rollout."""
        mask = torch.cat([micro["response_mask"] for micro in parts])
        log_prob = torch.cat([lp for lp, _ in forwards]).float()
        entropy = torch.cat([ent for _, ent in forwards]).float()
        mode = self.actor_cfg.loss_agg_mode
        out: dict[str, torch.Tensor | float] = {
            "actor/entropy": as_metric(agg_loss(entropy, mask, mode) * weights(mask, mode))}
        if self.correction.bypass or "rollout_log_probs" in parts[0]:
            rollout = torch.cat([self.correction.rollout_log_probs(micro) for micro in parts])
            out.update(rollout_agreement_metrics(rollout, log_prob, mask))
            out.update(self.correction.metrics(log_prob, rollout, mask))
        return out

    # ------------------------------------------------------- state & weights
    def named_weights(self, gather_dtype: torch.dtype | None = None):
        """(HF name, full tensor) pairs for the rollout engine's weight sync (gathered under FSDP2, in
        `gather_dtype` when given: the rollout's dtype, so the gather moves no bytes the rollout drops).

        A generator: parameters are brought in (param_offload) only while the consumer iterates. With
        LoRA the first sync sends every weight with the adapter merged, later ones only the merged
        targeted layers (what changed), never a full-model copy.
        """
        with self.offloader.for_compute():
            if not self.lora:
                yield from self.parallel.named_weights(gather_dtype)
                return
            deltas_only, self._base_synced = self._base_synced, True
            yield from self._lora_weights(deltas_only)

    def _lora_weights(self, deltas_only: bool):
        """The sync's weights with the adapter merged: all parameters at once, or on FSDP ranks one unsharded
        unit (decoder layer) at a time, as verl's layered summon."""
        from hybridrl.models.lora import lora_targets, merged_weights_among

        targeted = lora_targets(self.model)
        for names in self.parallel.weight_units():
            yield from merged_weights_among(self.model, names, targeted, deltas_only)


def _loss_settings(actor_cfg) -> ActorLossSettings:
    """What the policy loss reads, under verl's ActorConfig names."""
    loss = actor_cfg.policy_loss
    return ActorLossSettings(
        clip_ratio=actor_cfg.clip_ratio, clip_ratio_low=actor_cfg.clip_ratio_low,
        clip_ratio_high=actor_cfg.clip_ratio_high, clip_ratio_c=actor_cfg.clip_ratio_c, tau_pos=actor_cfg.tau_pos,
        tau_neg=actor_cfg.tau_neg, loss_agg_mode=actor_cfg.loss_agg_mode, loss_scale_factor=actor_cfg.loss_scale_factor,
        policy_loss=PolicyLossSettings(
            loss_mode=loss.loss_mode, clip_cov_ratio=loss.clip_cov_ratio, clip_cov_lb=loss.clip_cov_lb,
            clip_cov_ub=loss.clip_cov_ub, kl_cov_ratio=loss.kl_cov_ratio, ppo_kl_coef=loss.ppo_kl_coef,
            dro_beta=loss.dro_beta))


def _check_on_policy(ppo_epochs: int, num_mini_batches: int) -> None:
    if ppo_epochs != 1 or num_mini_batches != 1:
        raise ValueError(
            f"update_actor got a batch without old_log_probs, which only an on-policy update may take (one epoch "
            f"over one mini-batch), but this one runs {ppo_epochs} epoch(s) over {num_mini_batches} mini-batches; "
            "compute old log-probs first (ActorWorker.compute_log_prob) or set "
            "actor_rollout_ref.actor.reuse_on_policy_log_prob=false")


def _apply_lora(model, model_cfg):
    """PEFT LoRA from verl's keys; only the adapter trains (the reference = adapter disabled)."""
    from hybridrl.models.lora import apply_lora

    return apply_lora(model, rank=model_cfg.lora_rank, alpha=model_cfg.lora_alpha,
                      target_modules=model_cfg.target_modules, exclude_modules=model_cfg.exclude_modules,
                      adapter_path=model_cfg.lora_adapter_path)
