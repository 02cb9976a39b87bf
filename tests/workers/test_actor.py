"""ActorWorker's loss terms follow the actor keys (the loss functions themselves: tests/algorithms)."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize("loss_mode", ["geo_mean", "cispo"])
def test_registered_losses_give_the_mini_batch_value_whatever_the_micro_batch_split(tiny_model_dir, loss_mode):
    """The actor calls every loss through the registry with its verl-named settings; a loss with its own
    aggregation (geo_mean: a mean over sequences) is weighted by it, so 4 micro-batches of 2 rows report the
    same actor/pg_loss as 1 of 8 (one optimizer step after all of them)."""
    batch = ragged_batch(num_rows=8, seed=5)
    keys = [f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}"]
    split = build_actor(tiny_model_dir, keys).update_actor(batch)
    whole = build_actor(tiny_model_dir, keys + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"]).update_actor(batch)
    torch.testing.assert_close(torch.tensor(split["actor/pg_loss"]), torch.tensor(whole["actor/pg_loss"]),
                               rtol=1e-5, atol=1e-6)
    assert {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} <= set(split)


@pytest.mark.parametrize("fp32_residual", [True, False])
def test_the_model_key_decides_the_actors_residual_stream(tiny_model_dir, fp32_residual):
    """actor_rollout_ref.model.fp32_residual_stream reaches the actor's model (its hooks; the engine side:
    tests/rollout/engine/test_llm_engine.py)."""
    from hybridrl.models.numerics import keeps_fp32_residual_stream

    actor = build_actor(tiny_model_dir, [f"actor_rollout_ref.model.fp32_residual_stream={fp32_residual}"])
    assert keeps_fp32_residual_stream(actor.model) is fp32_residual


@pytest.mark.parametrize("remove_padding", [True, False])
def test_compute_log_prob_carries_sum_pi_squared_of_each_response_token(tiny_model_dir, remove_padding):
    """actor.calculate_sum_pi_squared adds `sum_pi_squared` (B, R): Σ_v softmax(logits / T)² at each response
    token, as a full-vocabulary HF forward gives it; old_log_probs are the same with and without it."""
    batch = ragged_batch(num_rows=6, seed=7)
    batch.meta["temperature"] = 0.7
    padding = [f"actor_rollout_ref.actor.use_remove_padding={remove_padding}"]
    actor = build_actor(tiny_model_dir, padding + ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"])
    out = actor.compute_log_prob(batch)
    plain = build_actor(tiny_model_dir, padding).compute_log_prob(batch)
    assert "sum_pi_squared" not in plain
    torch.testing.assert_close(out["old_log_probs"], plain["old_log_probs"])
    with torch.no_grad():
        logits = actor.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             position_ids=batch["position_ids"]).logits.double()
    response_len = batch["responses"].shape[1]
    probs = torch.softmax(logits[:, -response_len - 1:-1] / 0.7, dim=-1)
    mask = batch["response_mask"].bool()
    assert out["sum_pi_squared"].shape == mask.shape and out["sum_pi_squared"].dtype == torch.float32
    torch.testing.assert_close(out["sum_pi_squared"][mask], (probs ** 2).sum(-1)[mask].float(), atol=1e-5, rtol=1e-4)
