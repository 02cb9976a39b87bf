"""The distillation term of the actor's loss (verl's `distillation_ppo_loss`), when distillation.enabled.

Per micro-batch: the student's forward (with the top-k modes, also its log-probs at the teacher's top-k ids:
distill_forward.py), the distillation loss (algorithms/distillation.py) weighted by the micro-batch's share of
the mini-batch like every other term, and the total

    use_task_rewards:      task loss (policy + entropy + KL terms) + distillation_loss_coef · distillation loss
    not use_task_rewards:  distillation loss alone

Metrics carry verl's logged names, `actor/distillation/*`: the loss (`actor/distillation/loss`, the aggregated
value the gradient follows), the per-token range before clamping (`loss_min`, `loss_max`, the extremes over the
step), and each mode's own (abs_loss; student/teacher mass; the policy loss's clip fractions under
use_policy_gradient).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from hybridrl.algorithms import ActorLossSettings
from hybridrl.algorithms.distillation import (DistillationLossParams, DistillationSettings, distillation_loss,
                                              get_distillation_loss_settings)
from hybridrl.algorithms.policy_loss import policy_agg_mode
from hybridrl.config.schema import HybridRLConfig
from hybridrl.utils.batch import Batch
from hybridrl.workers.distill_forward import student_topk_forward
from hybridrl.workers.forward import response_log_probs
from hybridrl.workers.loss_scope import MicroBatchWeights
from hybridrl.workers.update_metrics import as_metric

LOSS_KEY = "actor/distillation/loss"


class ActorDistillation:
    def __init__(self, cfg: HybridRLConfig, actor_settings: ActorLossSettings) -> None:
        loss = cfg.distillation.distillation_loss
        self.params = DistillationLossParams(
            loss_mode=loss.loss_mode, topk=loss.topk, use_task_rewards=loss.use_task_rewards,
            distillation_loss_coef=loss.distillation_loss_coef, loss_max_clamp=loss.loss_max_clamp,
            log_prob_min_clamp=loss.log_prob_min_clamp, use_policy_gradient=loss.use_policy_gradient,
            policy_loss_mode=loss.policy_loss_mode, clip_ratio=loss.clip_ratio, clip_ratio_low=loss.clip_ratio_low,
            clip_ratio_high=loss.clip_ratio_high)
        self.settings = DistillationSettings(self.params)
        self.chunk_rows = loss.chunked_topk_chunk_size if loss.use_chunked_topk else None  # None: sized by memory
        self.use_topk = get_distillation_loss_settings(loss.loss_mode).use_topk
        self.actor_settings = actor_settings
        agg = actor_settings.loss_agg_mode
        # how the loss is aggregated: its weight across micro-batches follows that mode
        self.agg_mode = policy_agg_mode(loss.policy_loss_mode, agg) if loss.use_policy_gradient else agg
        self.keys = ("teacher_logprobs", "teacher_ids") if self.use_topk else ("teacher_logprobs",)
        self._extremes: dict[str, list[torch.Tensor]] = defaultdict(list)

    def forward(self, model: torch.nn.Module, micro: Batch, need_entropy: bool, remove_padding: bool
                ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
        """(log_prob (B, R), entropy or None, the model output the distillation loss reads)."""
        temperature = micro.meta["temperature"]
        if not self.use_topk:
            log_prob, entropy = response_log_probs(model, micro, temperature, need_entropy, remove_padding)
            return log_prob, entropy, {"log_probs": log_prob}
        log_prob, entropy, topk = student_topk_forward(model, micro, temperature, need_entropy, remove_padding,
                                                       self.params.log_prob_min_clamp, self.chunk_rows)
        return log_prob, entropy, {"log_probs": log_prob, **topk}

    def add_loss(self, task_loss: torch.Tensor, micro: Batch, model_output: dict[str, torch.Tensor],
                 old_log_prob: torch.Tensor, mask: torch.Tensor, weights: MicroBatchWeights,
                 metrics: dict[str, Any]) -> torch.Tensor:
        """The micro-batch's total loss (see the module docstring); its weighted metric parts into `metrics`."""
        data = {key: micro[key] for key in self.keys}
        data.update(response_mask=mask, old_log_probs=old_log_prob, rollout_is_weights=micro.get("rollout_is_weights"))
        loss, parts = distillation_loss(self.actor_settings, self.settings, model_output, data)
        weighted = loss * weights(mask, self.agg_mode)
        metrics[LOSS_KEY] = as_metric(weighted)
        token_weight = weights(mask, "token-mean")
        for key, value in parts.items():
            if key.endswith(("_min", "_max")):
                self._extremes[f"actor/{key}"].append(torch.as_tensor(value).detach().float())
            else:
                metrics[f"actor/{key}"] = as_metric(value * token_weight)
        if not self.params.use_task_rewards:
            return weighted
        return task_loss + self.params.distillation_loss_coef * weighted

    def pop_extremes(self) -> dict[str, float]:
        """The step's `*_min` / `*_max` metrics: extremes over every micro-batch (the ranks then take theirs)."""
        out = {key: (torch.stack(values).min() if key.endswith("_min") else torch.stack(values).max()).item()
               for key, values in self._extremes.items()}
        self._extremes.clear()
        return out
