"""KL estimators between the policy and the reference (Schulman's k1/k2/k3), KL controllers, and the
in-reward KL penalty (verl core_algos.kl_penalty, AdaptiveKLController, ray_trainer.apply_kl_penalty)."""

from __future__ import annotations

import torch

from hybridrl.algorithms.masked import masked_mean

KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
LOG_RATIO_CLAMP = 20.0  # k3: ref − logp clamped to ±20 before exp
K3_CLAMP = 10.0  # k3 value clamped to ±10


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate `(B, T)` for `kl_penalty` in kl/k1, abs, mse/k2, low_var_kl/k3.

    A `+` suffix (e.g. `k3+`) is straight-through: the value of the named estimator with the gradient of
    k2, `k2 − sg(k2) + sg(value)`, since k2's gradient is the unbiased one. verl HEAD passes the name with
    its `+` to the estimator table and so raises for `k3+`; we strip it first (the documented intent).
    """
    straight_through = kl_penalty.endswith("+")
    name = kl_penalty[:-1] if straight_through else kl_penalty
    forward_score = _kl_estimate(logprob, ref_logprob, name)
    if not straight_through:
        return forward_score
    backward_score = 0.5 * (logprob - ref_logprob).square()
    return backward_score - backward_score.detach() + forward_score.detach()


def _kl_estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, name: str) -> torch.Tensor:
    if name in ("kl", "k1"):
        return logprob - ref_logprob
    if name == "abs":
        return (logprob - ref_logprob).abs()
    if name in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if name in ("low_var_kl", "k3"):
        # k3 = exp(ref − logp) − (ref − logp) − 1  (http://joschu.net/blog/kl-approx.html)
        log_ratio = torch.clamp(ref_logprob - logprob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-K3_CLAMP, max=K3_CLAMP)
    if name == "full":
        raise NotImplementedError(
            "kl_penalty='full' needs the full vocabulary distributions, which sampled-token log-probs do not "
            "carry (verl does not implement it either); use 'low_var_kl' (k3) or 'kl' (k1)"
        )
    valid = ", ".join(KL_ESTIMATORS[:-1])
    raise ValueError(f"kl_penalty={name!r} is not a KL estimator; choose one of {valid} (a '+' suffix is allowed)")


class FixedKLController:
    """Constant KL coefficient; `update` is a no-op."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (kept for a uniform controller interface)."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController(FixedKLController):
    """Adaptive KL coefficient (Ziegler et al. 2019, arXiv 1909.08593):
    e = clip(KL/target − 1, −0.2, 0.2);  β ← β·(1 + e·n_steps/horizon)."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        super().__init__(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + proportional_error * n_steps / self.horizon


def get_kl_controller(kl_type: str, kl_coef: float, target_kl: float | None = None,
                      horizon: float | None = None) -> FixedKLController:
    """`algorithm.kl_ctrl.type` fixed|adaptive → a controller with `.value` and `.update(kl, n_steps)`."""
    if kl_type == "fixed":
        return FixedKLController(kl_coef)
    if kl_type == "adaptive":
        if horizon is None or horizon <= 0:
            raise ValueError(f"algorithm.kl_ctrl.horizon ({horizon}) must be > 0 for the adaptive controller")
        if target_kl is None or target_kl <= 0:
            raise ValueError(f"algorithm.kl_ctrl.target_kl ({target_kl}) must be > 0 for the adaptive controller")
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"algorithm.kl_ctrl.type={kl_type!r} is not supported; choose 'fixed' or 'adaptive'")


@torch.no_grad()
def apply_kl_penalty(token_level_scores: torch.Tensor, old_log_probs: torch.Tensor, ref_log_prob: torch.Tensor,
                     response_mask: torch.Tensor, kl_coef: float, kl_penalty_type: str
                     ) -> tuple[torch.Tensor, float, dict[str, float]]:
    """KL in the reward: rewards = scores − β·kld·mask, all `(B, T)`.

    current_kl = mean over rows of the per-row masked-mean kld; the caller then runs
    `kl_ctrl.update(current_kl, n_steps=B)` as verl's trainer does.
    """
    kld = kl_penalty(old_log_probs, ref_log_prob, kl_penalty_type) * response_mask
    token_level_rewards = token_level_scores - kl_coef * kld
    current_kl = torch.mean(masked_mean(kld, response_mask, axis=-1), dim=0).item()
    metrics = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": kl_coef}
    return token_level_rewards, current_kl, metrics
