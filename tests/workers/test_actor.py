"""ActorWorker's loss terms follow the actor keys (the loss functions themselves: tests/algorithms)."""

from __future__ import annotations

import torch

from tests.workers.helpers import build_actor, ragged_batch

NORM = ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm", "actor_rollout_ref.actor.use_kl_loss=true"]


def test_loss_scale_factor_divides_every_seq_mean_token_sum_norm_term(tiny_model_dir):
    """Dr.GRPO's divisor reaches the policy and KL terms (verl passes it with the batch info to both): one
    mini-batch of 4 micro-batches, one optimizer step after them, so every loss sees the same weights and
    the divisor 2.5 instead of the padded length 10 scales each by 4."""
    batch = ragged_batch(num_rows=8, seed=3)
    batch["ref_log_prob"] = batch["old_log_probs"] - 0.1 * torch.rand(batch["old_log_probs"].shape,
                                                                      generator=torch.Generator().manual_seed(4))
    default = build_actor(tiny_model_dir, NORM).update_actor(batch)
    scaled = build_actor(tiny_model_dir, NORM + ["actor_rollout_ref.actor.loss_scale_factor=2.5"]).update_actor(batch)
    for key in ("actor/pg_loss", "actor/kl_loss"):
        torch.testing.assert_close(torch.tensor(scaled[key]), torch.tensor(default[key] * 4), rtol=1e-5, atol=1e-7)
