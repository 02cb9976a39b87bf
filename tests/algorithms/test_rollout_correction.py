"""Rollout correction: IS weights (token, sequence, geometric; TIS, IcePop; batch normalisation; the safety
clamp), the per-token veto, off-policy metrics and the one-call entry point, by hand.

log_ratio = log π_train − log π_rollout, so a token's ratio ρ = exp(log_ratio).
"""

import math

import pytest
import torch

from hybridrl.algorithms import (
    RolloutCorrectionSettings,
    compute_rollout_correction,
    compute_rollout_correction_and_rejection_mask,
    rollout_corr_metrics,
)
from hybridrl.algorithms.rollout_correction import offpolicy_metrics, rollout_is_weights

LN = math.log
# one row, token ratios 3, 0.5, 1 and a padded token with ratio 100
TOKEN_LOG_RATIO = torch.tensor([[LN(3.0), LN(0.5), 0.0, LN(100.0)]])
TOKEN_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])


def test_token_tis_truncates_and_reports_verls_statistics():
    weights, metrics = rollout_is_weights(TOKEN_LOG_RATIO, TOKEN_MASK, "token", 2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5, 1.0, 0.0]]))
    expect = {
        "rollout_is_mean": 7 / 6, "rollout_is_max": 2.0, "rollout_is_min": 0.5,
        "rollout_is_ratio_fraction_high": 1 / 3,  # raw 3 > 2
        "rollout_is_ratio_fraction_low": 0.0,  # 0.5 is not below 1/2
        "rollout_is_std": math.sqrt(1.75 - (7 / 6) ** 2),  # E[w²] = (4 + 0.25 + 1)/3
        "rollout_is_eff_sample_size": 7 / 9,  # 1 / E[(w / E w)²] = 1 / (189/49/3)
        "rollout_is_seq_mean": 7 / 6, "rollout_is_seq_std": 0.0, "rollout_is_seq_max_deviation": 1 / 6,
        "rollout_is_seq_fraction_high": 0.0,  # raw row mean (3 + 0.5 + 1)/3 = 1.5 <= 2
    }
    for key, value in expect.items():
        assert metrics[key].item() == pytest.approx(value, rel=1e-5), key
    assert not weights.requires_grad


def test_sequence_and_geometric_levels_put_one_weight_on_every_token_of_a_row():
    # row 0: log-ratios (0.5, 0.3): product e^0.8 = 2.2255 -> TIS 2; geometric mean e^0.4 = 1.4918
    # row 1: (−0.2, padded 5): e^−0.2 = 0.8187 for both levels
    log_ratio = torch.tensor([[0.5, 0.3], [-0.2, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    weights, metrics = rollout_is_weights(log_ratio, mask, "sequence", 2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0], [math.exp(-0.2), 0.0]]))
    assert metrics["rollout_is_max"].item() == pytest.approx(math.exp(0.8))  # read before truncation
    assert metrics["rollout_is_min"].item() == pytest.approx(math.exp(-0.2))
    assert metrics["rollout_is_ratio_fraction_high"].item() == 0.5  # one row of two above C
    geometric, _ = rollout_is_weights(log_ratio, mask, "geometric", 2.0)
    torch.testing.assert_close(geometric, torch.tensor([[math.exp(0.4), math.exp(0.4)], [math.exp(-0.2), 0.0]]))


def test_icepop_zeroes_weights_outside_the_band():
    log_ratio = torch.tensor([[LN(3.0), LN(0.5), 0.0, LN(0.4)]])
    weights, metrics = rollout_is_weights(log_ratio, torch.ones(1, 4), "token", "0.5_2.0")
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.5, 1.0, 0.0]]))
    assert metrics["rollout_is_oob_ratio"].item() == 0.5
    assert metrics["rollout_is_ratio_fraction_low"].item() == 0.25  # 0.4 < 0.5


def test_batch_normalisation_and_the_safety_clamp():
    weights, metrics = rollout_is_weights(TOKEN_LOG_RATIO, TOKEN_MASK, "token", 2.0, rollout_is_batch_normalize=True)
    torch.testing.assert_close(weights, torch.tensor([[12 / 7, 3 / 7, 6 / 7, 0.0]]))
    assert metrics["rollout_is_batch_norm_factor"].item() == pytest.approx(7 / 6)
    # sequence level: normalised over rows (0.5 and 2 -> mean 1.25)
    seq, seq_metrics = rollout_is_weights(torch.tensor([[LN(0.5)], [LN(2.0)]]), torch.ones(2, 1), "sequence", 4.0,
                                          rollout_is_batch_normalize=True)
    torch.testing.assert_close(seq, torch.tensor([[0.4], [1.6]]))
    assert seq_metrics["rollout_is_batch_norm_factor"].item() == pytest.approx(1.25)
    huge, _ = rollout_is_weights(torch.tensor([[30.0]]), torch.ones(1, 1), "token", 1e12)
    torch.testing.assert_close(huge, torch.tensor([[math.exp(20.0)]]))  # log-ratios clamped to ±20


@pytest.mark.parametrize("threshold, message", [
    ("abc", "must be a number"), (True, "must be a number"), (-1.0, "must be positive"), ("2.0_0.5", "lower <= upper"),
])
def test_bad_thresholds_and_levels_are_refused(threshold, message):
    with pytest.raises(ValueError, match=message):
        rollout_is_weights(TOKEN_LOG_RATIO, TOKEN_MASK, "token", threshold)
    with pytest.raises(ValueError, match="not an IS level"):
        rollout_is_weights(TOKEN_LOG_RATIO, TOKEN_MASK, "tokens", 2.0)


# training log-probs (ln 0.5, ln 0.25), rollout (ln 0.25, ln 0.25): ρ = (2, 1)
TRAIN = torch.tensor([[LN(0.5), LN(0.25)]])
ROLLOUT = torch.tensor([[LN(0.25), LN(0.25)]])


def test_offpolicy_metrics_by_hand():
    metrics = {key: value.item() for key, value in offpolicy_metrics(TRAIN, ROLLOUT, torch.ones(1, 2)).items()}
    expect = {
        "kl": -LN(2) / 2,  # E[log π_rollout − log π_train]
        "k3_kl": (2 - LN(2) - 1) / 2,  # E[ρ − log ρ − 1]
        "training_ppl": 1 / math.sqrt(0.125), "rollout_ppl": 4.0, "rollout_log_ppl": LN(4.0),
        "log_ppl_diff": -LN(2) / 2, "log_ppl_abs_diff": LN(2) / 2, "ppl_ratio": math.exp(-LN(2) / 2),
        "chi2_token": (4 + 1) / 2 - 1, "chi2_seq": 2.0**2 - 1,
    }
    for key, value in expect.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5), key


def test_metrics_only_call_runs_with_correction_off():
    metrics = rollout_corr_metrics(TRAIN, ROLLOUT, torch.ones(1, 2))
    assert metrics["rollout_corr/chi2_seq"] == pytest.approx(3.0)
    assert not any(key.startswith("rollout_corr/rollout_is") for key in metrics)
    assert all(isinstance(value, float) for value in metrics.values())
    assert rollout_corr_metrics(TRAIN, ROLLOUT, torch.zeros(1, 2)) == {}


def test_the_entry_point_combines_weights_rejection_veto_and_metrics():
    # rows: ρ = (3, 0.5, 1) | (1, 1e-5, 1): token_k1 in [1/2, 2] drops row 0's first token; the veto (1e-4) drops
    # row 1 whole; TIS at 2 on the weights
    train = torch.tensor([[LN(3.0), LN(0.5), 0.0], [0.0, LN(1e-5), 0.0]])
    mask = torch.ones(2, 3)
    result = compute_rollout_correction_and_rejection_mask(
        train, torch.zeros(2, 3), mask, rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k1",
        rollout_rs_threshold="0.5_2.0", rollout_token_veto_threshold=1e-4)
    weights, new_mask, metrics = result
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5, 1.0], [1.0, 1e-5, 1.0]]))
    torch.testing.assert_close(new_mask, torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert metrics["rollout_corr/rollout_is_veto_fraction"] == 0.5
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 6)  # before the veto: ρ 3, 1e-5
    assert {"rollout_corr/kl", "rollout_corr/chi2_token", "rollout_corr/rollout_is_eff_sample_size"} <= set(metrics)
    torch.testing.assert_close(mask, torch.ones(2, 3))  # the caller's mask is not modified
    off = compute_rollout_correction(train, torch.zeros(2, 3), mask, RolloutCorrectionSettings())
    assert off.weights is None and torch.equal(off.response_mask, mask)


def test_the_entry_point_refuses_mismatched_or_empty_inputs():
    with pytest.raises(ValueError, match="equal shapes"):
        compute_rollout_correction_and_rejection_mask(TRAIN, ROLLOUT[:, :1], torch.ones(1, 2))
    with pytest.raises(ValueError, match="no valid token"):
        compute_rollout_correction_and_rejection_mask(TRAIN, ROLLOUT, torch.zeros(1, 2))
    with pytest.raises(ValueError, match="must be positive"):
        compute_rollout_correction_and_rejection_mask(TRAIN, ROLLOUT, torch.ones(1, 2),
                                                      rollout_token_veto_threshold=0.0)
