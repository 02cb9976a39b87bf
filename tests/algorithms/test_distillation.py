"""Distillation losses on hand-derived values (verl/trainer/distillation/losses.py semantics)."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algorithms import ActorLossSettings
from hybridrl.algorithms.distill_topk import forward_kl_topk, log_probs_at_ids_from_hidden, topk_log_probs_from_hidden
from hybridrl.algorithms.distillation import (DISTILLATION_LOSSES, DistillationLossParams, DistillationLossSettings,
                                              DistillationSettings, distillation_loss, get_distillation_loss_settings,
                                              register_distillation_loss)

STUDENT = torch.tensor([[-1.0, -2.0, -3.0]])
TEACHER = torch.tensor([[-1.5, -1.0, -0.1]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])


def settings(**params) -> DistillationSettings:
    return DistillationSettings(DistillationLossParams(**params))


def estimator_loss(loss_mode: str, **params):
    data = {"teacher_logprobs": TEACHER, "response_mask": MASK, "old_log_probs": STUDENT}
    return distillation_loss(ActorLossSettings(), settings(loss_mode=loss_mode, **params), {"log_probs": STUDENT}, data)


def test_k3_is_schulmans_estimator_on_the_sampled_tokens():
    # r = teacher - student = (-0.5, 1.0); k3 = e^r - r - 1 = (0.106531, 0.718282); token-mean over 2 tokens
    loss, metrics = estimator_loss("k3")
    assert loss.item() == pytest.approx((math.exp(-0.5) - 0.5 + math.exp(1.0) - 2.0) / 2, abs=1e-6)
    assert metrics["distillation/loss_min"].item() == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-6)
    assert metrics["distillation/loss_max"].item() == pytest.approx(math.exp(1.0) - 2.0, abs=1e-6)
    assert metrics["distillation/abs_loss"].item() == pytest.approx(loss.item(), abs=1e-6)


def test_k1_is_negative_where_the_teacher_likes_the_token_more_and_abs_loss_reports_magnitude():
    # k1 = student - teacher = (0.5, -1.0): mean -0.25, mean |k1| 0.75
    loss, metrics = estimator_loss("k1")
    assert loss.item() == pytest.approx(-0.25)
    assert metrics["distillation/abs_loss"].item() == pytest.approx(0.75)


def test_loss_max_clamp_clamps_both_signs_after_the_range_metrics():
    loss, metrics = estimator_loss("k1", loss_max_clamp=0.5)  # (0.5, -1.0) -> (0.5, -0.5)
    assert loss.item() == pytest.approx(0.0)
    assert metrics["distillation/loss_min"].item() == pytest.approx(-1.0)


def test_policy_gradient_mode_uses_minus_the_loss_as_advantage():
    # vanilla PPO at ratio 1: pg_loss = mean(-A) = mean(k1) = -0.25; d pg_loss / d logp_t = -A_t / 2 = k1_t / 2
    log_probs = STUDENT.clone().requires_grad_(True)
    data = {"teacher_logprobs": TEACHER, "response_mask": MASK, "old_log_probs": STUDENT}
    loss, metrics = distillation_loss(ActorLossSettings(), settings(loss_mode="k1", use_policy_gradient=True),
                                      {"log_probs": log_probs}, data)
    loss.backward()
    assert loss.item() == pytest.approx(-0.25)
    torch.testing.assert_close(log_probs.grad, torch.tensor([[0.25, -0.5, 0.0]]))
    assert "distillation/pg_clipfrac" in metrics and "distillation/pg_loss" not in metrics


def test_policy_gradient_mode_clips_with_the_distillation_clip_ratios():
    # ratio e^0.5 = 1.65 > 1 + 0.2 with a positive advantage (teacher prefers token 1): clipped, no gradient
    log_probs = (STUDENT + torch.tensor([[0.0, 0.5, 0.0]])).requires_grad_(True)
    data = {"teacher_logprobs": TEACHER, "response_mask": MASK, "old_log_probs": STUDENT}
    loss, metrics = distillation_loss(ActorLossSettings(clip_ratio_high=10.0),
                                      settings(loss_mode="k1", use_policy_gradient=True),
                                      {"log_probs": log_probs}, data)
    loss.backward()
    assert log_probs.grad[0, 1].item() == 0.0
    assert metrics["distillation/pg_clipfrac"].item() == pytest.approx(0.5)


def test_forward_kl_topk_by_hand():
    # ν = (0.7, 0.2), π = (0.5, 0.25): KL = 0.7 ln(0.7/0.5) + 0.2 ln(0.2/0.25)
    student = torch.log(torch.tensor([[0.5, 0.25]]))
    teacher = torch.log(torch.tensor([[0.7, 0.2]]))
    out = forward_kl_topk(student, teacher, torch.tensor([[1, 2]]), torch.tensor([[1, 5]]))
    assert out["distillation_losses"].item() == pytest.approx(0.7 * math.log(1.4) + 0.2 * math.log(0.8), abs=1e-6)
    assert out["student_mass"].item() == pytest.approx(0.75)
    assert out["teacher_mass"].item() == pytest.approx(0.9)
    assert out["overlap_count"].item() == 1  # id 1 is in both top-2 sets
    assert out["overlap_token_advantage"].item() == pytest.approx(-0.7 * math.log(1.4), abs=1e-6)


def test_forward_kl_topk_floors_log_probs_but_not_the_masses():
    student = torch.tensor([[-20.0, -1.0]])
    teacher = torch.log(torch.tensor([[0.5, 0.5]]))
    out = forward_kl_topk(student, teacher, torch.tensor([[0, 1]]), torch.tensor([[1, 2]]), log_prob_min_clamp=-10.0)
    expected = 0.5 * (math.log(0.5) + 10.0) + 0.5 * (math.log(0.5) + 1.0)
    assert out["distillation_losses"].item() == pytest.approx(expected, abs=1e-5)
    assert out["student_mass"].item() == pytest.approx(math.exp(-20.0) + math.exp(-1.0), abs=1e-6)


def test_forward_kl_topk_gradient_is_student_mass_times_pi_minus_nu():
    # d/dz_j Σ_k ν_k (log ν_k − log softmax(z)_k) = π_j Σ_k ν_k − ν_j  (ν_j = 0 off the top-k)
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.5]], requires_grad=True)
    ids = torch.tensor([[2, 0]])
    teacher = torch.log(torch.tensor([[0.6, 0.3]]))
    student = torch.log_softmax(logits, -1).gather(-1, ids)
    forward_kl_topk(student, teacher, ids, ids)["distillation_losses"].sum().backward()
    pi = torch.softmax(logits.detach(), -1)
    nu = torch.tensor([[0.3, 0.0, 0.6, 0.0]])
    torch.testing.assert_close(logits.grad, pi * 0.9 - nu)


def test_overlap_metrics_follow_verls_example():
    # verl tests/workers/test_distillation_topk_symmetry_on_cpu.py: overlap counts (2, 1, 0)
    logits = torch.tensor([[0.0, 9.0, 8.0, 1.0, 0.0, 0.0], [8.0, 7.0, 0.0, 0.0, 9.0, 0.0],
                           [9.0, 8.0, 7.0, 0.0, 0.0, 0.0]])
    ids = torch.tensor([[1, 2], [4, 5], [3, 4]])
    teacher = torch.log(torch.tensor([[0.7, 0.2], [0.6, 0.3], [0.5, 0.4]]))
    student = torch.log_softmax(logits, -1).gather(-1, ids)
    own = torch.topk(logits, 2, dim=-1).indices
    out = forward_kl_topk(student, teacher, ids, own)
    assert out["overlap_count"].tolist() == [2, 1, 0]
    token_adv = -(teacher.exp() * (teacher - student))
    torch.testing.assert_close(out["overlap_token_advantage"],
                               torch.stack([token_adv[0].mean(), token_adv[1, 0], torch.tensor(0.0)]))
    model_output = {key: value.unsqueeze(0) for key, value in out.items()}
    _, metrics = distillation_loss(ActorLossSettings(), settings(loss_mode="forward_kl_topk", topk=2), model_output,
                                   {"response_mask": torch.ones(1, 3)})
    assert metrics["distillation/overlap_ratio"].item() == pytest.approx(0.5)  # (2 + 1 + 0) / 3 / k
    assert metrics["distillation/teacher_mass_min"].item() == pytest.approx(0.9)


def test_log_probs_at_ids_match_log_softmax_and_keep_gradients_through_checkpointed_chunks():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(5, 4, generator=gen, requires_grad=True)
    weight = torch.randn(7, 4, generator=gen, requires_grad=True)
    ids = torch.randint(0, 7, (5, 3), generator=gen)
    gathered, own = log_probs_at_ids_from_hidden(hidden, weight, ids, temperature=0.7, chunk_rows=2)
    direct = torch.log_softmax(hidden @ weight.t() / 0.7, -1)
    torch.testing.assert_close(gathered, direct.gather(-1, ids))
    torch.testing.assert_close(own, torch.topk(direct, 3, -1).indices)
    gathered.sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None
    direct.gather(-1, ids).sum().backward()
    torch.testing.assert_close(grads[0], hidden.grad)
    torch.testing.assert_close(grads[1], weight.grad)


def test_teacher_topk_from_hidden_is_log_softmax_topk():
    gen = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(5, 4, generator=gen), torch.randn(9, 4, generator=gen)
    values, ids = topk_log_probs_from_hidden(hidden, weight, 3, chunk_rows=2)
    top = torch.topk(torch.log_softmax(hidden @ weight.t(), -1), 3, -1)
    torch.testing.assert_close(values, top.values)
    assert torch.equal(ids, top.indices)


def test_registry_names_settings_and_refuses_a_second_function_under_a_taken_name():
    assert get_distillation_loss_settings("forward_kl_topk").use_topk
    assert get_distillation_loss_settings("low_var_kl").use_estimator
    with pytest.raises(ValueError, match="did you mean 'k3'"):
        get_distillation_loss_settings("k33")
    with pytest.raises(ValueError, match="already registered"):
        register_distillation_loss(DistillationLossSettings(names="k3", use_estimator=True))(lambda **kw: None)
    with pytest.raises(ValueError, match="exactly one"):
        DistillationLossSettings(names="x", use_topk=True, use_estimator=True)


def test_a_registered_loss_runs_through_distillation_loss():
    @register_distillation_loss(DistillationLossSettings(names="test_squared_gap", use_estimator=True))
    def squared_gap(config, distillation_config, model_output, data):
        return (model_output["log_probs"] - data["teacher_logprobs"]).square(), {}

    try:
        params = dict(loss_mode="test_squared_gap")
        data = {"teacher_logprobs": TEACHER, "response_mask": MASK}
        loss, _ = distillation_loss(ActorLossSettings(), settings(**params), {"log_probs": STUDENT}, data)
        assert loss.item() == pytest.approx((0.25 + 1.0) / 2)
    finally:
        DISTILLATION_LOSSES.pop("test_squared_gap")
