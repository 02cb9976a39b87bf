"""Rollout correction through the actor's update, against hand computations (the math itself:
tests/algorithms/test_rollout_correction.py, test_rejection_sampling.py).

Every batch is 8 rows in micro-batches of 2 and one optimizer step. Old log-probs are set to the model's own
log-probs, so the PPO ratio π_θ/π_old is exactly 1 at the update's forward and the policy loss of a token is
−A·w: what a user can write down from the batch alone. The rollout's log-probs are the model's minus a chosen
log-ratio, so ρ = π_train/π_rollout is chosen too.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tests.workers.helpers import build_actor, ragged_batch

TIS = ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0"]


def own_log_probs(actor, batch) -> torch.Tensor:
    return actor.compute_log_prob(batch)["old_log_probs"]


def chosen_ratios(batch, seed: int = 11) -> torch.Tensor:
    """ρ per token in [e^-1.2, e^1.2], so some exceed the cap 2 and some fall under 0.5."""
    gen = torch.Generator().manual_seed(seed)
    return torch.exp((torch.rand(batch["responses"].shape, generator=gen) * 2 - 1) * 1.2)


def token_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum())


def test_decoupled_weights_from_the_batch_multiply_the_policy_loss(tiny_model_dir):
    """After the old_log_prob pass the trainer hands the weights over as `rollout_is_weights`:
    pg_loss = −Σ A·w·m / Σ m over the mini-batch, whatever the micro-batch split."""
    actor = build_actor(tiny_model_dir)
    batch = ragged_batch(8, seed=2)
    batch["old_log_probs"] = own_log_probs(actor, batch)
    weights = torch.rand(batch["responses"].shape, generator=torch.Generator().manual_seed(3)) * 2
    batch["rollout_is_weights"] = weights
    mask, adv = batch["response_mask"].float(), batch["advantages"]
    metrics = actor.update_actor(batch)
    assert metrics["actor/pg_loss"] == pytest.approx(token_mean(-adv * weights, mask), rel=1e-5, abs=1e-6)
    assert not any(key.startswith("rollout_corr/") for key in metrics)  # the trainer logs them with the pass


def test_on_policy_shortcut_computes_truncated_weights_in_the_update(tiny_model_dir):
    """No old log-probs (one epoch over one mini-batch): π_old is the forward's own, so w = min(ρ, 2) with
    ρ = π_old/π_rollout, and the forward reports rollout_corr/* of π_old against π_rollout."""
    actor = build_actor(tiny_model_dir, TIS)
    batch = ragged_batch(8, seed=4)
    rho = chosen_ratios(batch)
    batch["rollout_log_probs"] = own_log_probs(actor, batch) - rho.log()
    batch.pop("old_log_probs")
    mask, adv = batch["response_mask"].float(), batch["advantages"]
    metrics = actor.update_actor(batch)
    capped = rho.clamp(max=2.0)
    assert metrics["actor/pg_loss"] == pytest.approx(token_mean(-adv * capped, mask), rel=1e-5, abs=1e-6)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(token_mean(capped, mask), rel=1e-5)
    assert metrics["rollout_corr/kl"] == pytest.approx(token_mean(-rho.log(), mask), rel=1e-4, abs=1e-6)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert metrics["training/rollout_log_probs_diff_max"] == pytest.approx(float(rho.log().abs()[mask.bool()].max()),
                                                                           rel=1e-4)


def bypass_batch(actor, seed: int):
    batch = ragged_batch(8, seed=seed)
    rho = chosen_ratios(batch, seed + 1)
    batch["old_log_probs"] = own_log_probs(actor, batch) - rho.log()  # bypass: π_old := π_rollout
    return batch, rho


@pytest.mark.parametrize("loss_type", ["ppo_clip", "reinforce"])
def test_bypass_mode_rejects_tokens_and_averages_over_the_kept_ones(tiny_model_dir, loss_type):
    """Bypass mode: ρ = π_θ/π_rollout inside the loss; token_k1 with bounds 0.5_1.5 bounds k1 = −log ρ to
    [log 0.5, log 1.5] (verl's convention), so tokens with ρ outside [1/1.5, 2] are rejected. The loss is the mean over the kept tokens of the whole mini-batch, although each micro-batch only
    learns its kept tokens in its own forward (MicroBatchWeights.observe / rescale): ppo_clip gives
    max(−A·ρ, −A·clip(ρ, 0.8, 1.2)) (dual-clipped at −3A for A < 0), reinforce −A·min(ρ, 2)·log π_θ, whose value
    per token here is −A·min(ρ, 2)·log π_θ. The gradient norm is that of the hand-written loss."""
    keys = ["algorithm.rollout_correction.bypass_mode=true", f"algorithm.rollout_correction.loss_type={loss_type}",
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=0.5_1.5"] + (TIS if loss_type == "reinforce" else [])
    actor = build_actor(tiny_model_dir, keys)
    reference = copy.deepcopy(actor.model)
    batch, rho = bypass_batch(actor, seed=6)
    adv = batch["advantages"]
    kept = batch["response_mask"].float() * ((rho >= 1 / 1.5) & (rho <= 2.0)).float()
    assert 0 < kept.sum() < batch["response_mask"].sum()  # some tokens rejected, some kept
    log_prob = reference_log_probs(reference, batch)
    if loss_type == "ppo_clip":
        ratio = torch.exp(log_prob - batch["old_log_probs"])
        clipped = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
        per_token = torch.where(adv < 0, torch.minimum(clipped, -adv * 3.0), clipped)
    else:
        per_token = -adv * rho.clamp(max=2.0) * log_prob
    hand_loss = (per_token * kept).sum() / kept.sum()
    hand_loss.backward()
    hand_loss = hand_loss.detach()
    hand_norm = torch.sqrt(sum(p.grad.square().sum() for p in reference.parameters() if p.grad is not None))
    metrics = actor.update_actor(batch)
    assert metrics["actor/pg_loss"] == pytest.approx(float(hand_loss), rel=1e-4, abs=1e-6)
    assert metrics["actor/grad_norm"] == pytest.approx(float(hand_norm), rel=1e-4)
    rejected = 1 - float(kept.sum() / batch["response_mask"].sum())
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(rejected, rel=1e-5)
    assert "actor/entropy" in metrics  # no old_log_prob pass ran: the update reports it


def reference_log_probs(model, batch) -> torch.Tensor:
    from hybridrl.workers.forward import response_log_probs

    model.train()
    log_prob, _ = response_log_probs(model, batch, 1.0, compute_entropy=False)
    return log_prob


def test_bypass_mode_without_rejection_is_ppo_on_the_rollout_ratio(tiny_model_dir):
    """No rejection: nothing to rescale; pg_loss is plain PPO with old = π_rollout, split or whole alike."""
    keys = ["algorithm.rollout_correction.bypass_mode=true"]
    split, whole = build_actor(tiny_model_dir, keys), build_actor(
        tiny_model_dir, keys + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"])
    batch, _ = bypass_batch(split, seed=8)
    got, want = split.update_actor(batch), whole.update_actor(batch)
    for key in ("actor/pg_loss", "actor/grad_norm", "rollout_corr/kl", "actor/pg_clipfrac"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
