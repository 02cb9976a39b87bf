"""KL estimators (incl. clamps and the '+' straight-through), controllers, KL-in-reward."""

import math

import pytest
import torch

from hybridrl.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)

# tokens: d = logp - ref = 1, -1, -30, 25
LOGP = torch.tensor([-1.0, -2.0, -30.0, 0.0])
REF = torch.tensor([-2.0, -1.0, 0.0, -25.0])


def test_estimators_by_hand_with_clamps():
    torch.testing.assert_close(kl_penalty(LOGP, REF, "kl"), torch.tensor([1.0, -1.0, -30.0, 25.0]))
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k1"), kl_penalty(LOGP, REF, "kl"))
    torch.testing.assert_close(kl_penalty(LOGP, REF, "abs"), torch.tensor([1.0, 1.0, 30.0, 25.0]))
    # k2 = 0.5 d^2 = 0.5, 0.5, 450, 312.5
    torch.testing.assert_close(kl_penalty(LOGP, REF, "mse"), torch.tensor([0.5, 0.5, 450.0, 312.5]))
    # k3 with x = ref - logp: e^x - x - 1
    #   x = -1: e^-1 + 1 - 1 = 0.367879;  x = 1: e - 2 = 0.718282
    #   x = 30 -> clamped to 20: e^20 - 21 ~ 4.85e8 -> clamped to 10
    #   x = -25 -> clamped to -20: e^-20 + 19 ~ 19.0 -> clamped to 10
    expected_k3 = torch.tensor([math.exp(-1), math.e - 2, 10.0, 10.0])
    torch.testing.assert_close(kl_penalty(LOGP, REF, "low_var_kl"), expected_k3)
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k3"), expected_k3)


def test_straight_through_has_k3_value_and_k2_gradient():
    logp = LOGP[:2].clone().requires_grad_(True)
    value = kl_penalty(logp, REF[:2], "k3+")
    torch.testing.assert_close(value.detach(), torch.tensor([math.exp(-1), math.e - 2]))
    value.sum().backward()
    # d k2 / d logp = logp - ref = (1, -1); plain k3 would give 1 - e^x = (0.632121, -1.718282)
    torch.testing.assert_close(logp.grad, torch.tensor([1.0, -1.0]))
    logp.grad = None
    kl_penalty(logp, REF[:2], "k3").sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([1 - math.exp(-1), 1 - math.e]))


def test_invalid_estimators():
    with pytest.raises(NotImplementedError, match="low_var_kl"):
        kl_penalty(LOGP, REF, "full")
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(LOGP, REF, "k4")


def test_adaptive_controller_by_hand():
    controller = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.5, horizon=100)
    controller.update(current_kl=0.6, n_steps=10)  # e = 0.6/0.5 - 1 = 0.2 -> x(1 + 0.2*10/100) = 0.102
    assert controller.value == pytest.approx(0.102)
    controller.update(current_kl=2.0, n_steps=10)  # e = 3 clipped to 0.2 -> 0.102 * 1.02 = 0.10404
    assert controller.value == pytest.approx(0.10404)
    controller.update(current_kl=0.45, n_steps=10)  # e = -0.1 -> 0.10404 * 0.99 = 0.1029996
    assert controller.value == pytest.approx(0.1029996)
    resumed = get_kl_controller("adaptive", kl_coef=0.1, target_kl=0.5, horizon=100)
    resumed.load_state_dict(controller.state_dict())
    assert resumed.value == controller.value


def test_fixed_controller_and_factory_errors():
    fixed = get_kl_controller("fixed", kl_coef=0.001)
    fixed.update(current_kl=5.0, n_steps=100)
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.001
    with pytest.raises(ValueError, match="horizon"):
        get_kl_controller("adaptive", kl_coef=0.1, target_kl=0.1, horizon=0)
    with pytest.raises(ValueError, match="'fixed' or 'adaptive'"):
        get_kl_controller("pid", kl_coef=0.1)


def test_apply_kl_penalty_by_hand():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    old = torch.full((2, 3), -1.0)
    ref = torch.tensor([[-1.5, -1.0, -2.0], [-1.2, -1.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # k1 = old - ref = (0.5, 0, 1), (0.2, 0, [8 masked]) ; beta 0.1
    rewards, current_kl, metrics = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.1, kl_penalty_type="kl")
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.0, 0.9], [-0.02, 2.0, 0.0]]))
    # per-row masked means 1.5/3 = 0.5 and 0.2/2 = 0.1 -> mean 0.3
    assert current_kl == pytest.approx(0.3)
    assert metrics == {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": 0.1}
