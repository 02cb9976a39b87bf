"""verl's gradient-variance proxies (variance_proxy/*) on hand-derived values.

w_t = 1 − 2π_t + Σπ²: (π, Σπ²) = (0.5, 0.5) gives 0.5, (0.5, 1.0) and (0.25, 0.5) give 1.
"""

import pytest
import torch

from hybridrl.algorithms.variance_proxy import compute_variance_proxy_metrics

# row 0: W = 0.5 + 1 = 1.5, Ā = mean(1, 3) = 2;  row 1: one token, W = 1, Ā = −1 (the masked 99 stays out)
ADVANTAGES = torch.tensor([[1.0, 3.0], [-1.0, 99.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
OLD_LOG_PROBS = torch.tensor([[0.5, 0.5], [0.25, 0.5]]).log()
SUM_PI_SQUARED = torch.tensor([[0.5, 1.0], [0.5, 0.5]])


def metrics(**kwargs):
    return compute_variance_proxy_metrics(ADVANTAGES, MASK, OLD_LOG_PROBS, SUM_PI_SQUARED, **kwargs)


def test_total_power_signal_and_noise_by_hand():
    # proxy2 = mean(Ā² W) = (4 · 1.5 + 1 · 1) / 2 = 3.5; grad norm 1: signal 1, noise (3.5 − 1) / (2 − 1) = 2.5
    got = metrics(gradient_norm=1.0)
    assert got == pytest.approx({
        "variance_proxy/proxy1_signal_strength": 1.0, "variance_proxy/proxy2_total_power": 3.5,
        "variance_proxy/proxy3_pure_noise": 2.5, "variance_proxy/expected_a_squared": 2.5,
        "variance_proxy/expected_w": 1.25}, rel=1e-6)
    assert metrics(gradient_norm=2.0)["variance_proxy/proxy3_pure_noise"] == 0.0  # 3.5 − 4 < 0: clamped
    without = metrics()  # no measured gradient norm: signal and noise report 0, as verl
    assert without["variance_proxy/proxy1_signal_strength"] == 0.0 == without["variance_proxy/proxy3_pure_noise"]


def test_rollout_is_weights_scale_the_proxies_as_verl():
    # ρ̄ = [[1, 2], [2, ·]]: expected_w = mean(0.5·1 + 1·4, 1·4) = 4.25;
    # proxy2 = mean(mean ρ̄² · Ā² · W) = mean(1.5² · 4 · 1.5, 2² · 1 · 1) = mean(13.5, 4) = 8.75
    got = metrics(rollout_is_weights=torch.tensor([[1.0, 2.0], [2.0, 5.0]]))
    assert got["variance_proxy/expected_w"] == pytest.approx(4.25, rel=1e-6)
    assert got["variance_proxy/proxy2_total_power"] == pytest.approx(8.75, rel=1e-6)
