"""Rollout rejection sampling (`rollout_rs`): each option's statistic, the mask it leaves, its metrics, by hand.

row 0: log-ratios (ln 3, ln 0.5, 0);  row 1: (0.1, −0.1, padded 9).
k1 = −lr, k2 = lr²/2, k3 = e^lr − 1 − lr.  Row 0: k2 = (0.6035, 0.2402, 0), k3 = (0.9014, 0.1931, 0);
Σ k1 = −ln 1.5 = −0.4055, mean k1 = −0.1352.  Row 1: Σ k1 = 0, k2 = 0.005 each.
"""

import math

import pytest
import torch

from hybridrl.algorithms.rejection_sampling import parse_rollout_rs, rollout_rejection_mask

LOG_RATIO = torch.tensor([[math.log(3.0), math.log(0.5), 0.0], [0.1, -0.1, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def _run(option, threshold):
    mask, metrics = rollout_rejection_mask(LOG_RATIO, MASK, option, threshold)
    return mask, {key: value.item() for key, value in metrics.items()}


def test_token_k2_drops_single_tokens():
    mask, metrics = _run("token_k2", 0.5)
    torch.testing.assert_close(mask, torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(1 / 5)
    assert metrics["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
    assert metrics["rollout_rs_token_k2_max"] == pytest.approx(0.5 * math.log(3.0) ** 2, rel=1e-5)
    assert metrics["rollout_rs_token_k2_fraction_high"] == pytest.approx(1 / 5)


def test_seq_sum_k1_is_the_sequence_ratio_band():
    # band [0.8, 1.25] on Π ρ: row 0's product 1.5 is outside (Σ k1 = −0.4055 < ln 0.8 = −0.2231): all 3 tokens go
    mask, metrics = _run("seq_sum_k1", "0.8_1.25")
    torch.testing.assert_close(mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert metrics["rollout_rs_seq_sum_k1_masked_fraction"] == pytest.approx(3 / 5)
    assert metrics["rollout_rs_seq_sum_k1_seq_masked_fraction"] == pytest.approx(1 / 2)
    assert metrics["rollout_rs_seq_sum_k1_min"] == pytest.approx(-math.log(1.5), rel=1e-5)
    assert metrics["rollout_rs_seq_sum_k1_fraction_low"] == pytest.approx(1 / 2)
    assert metrics["rollout_rs_seq_sum_k1_seq_fraction_low"] == pytest.approx(1 / 2)
    # a single number u means the band [1/u, u]: 2.0 keeps both rows
    kept, _ = _run("seq_sum_k1", 2.0)
    torch.testing.assert_close(kept, MASK)


def test_geometric_mean_and_max_options():
    kept, _ = _run("seq_mean_k1", "0.8_1.25")  # Geo-RS: row 0's geometric mean 1.5^(1/3) = 1.145 is inside
    torch.testing.assert_close(kept, MASK)
    dropped, metrics = _run("seq_max_k2", 0.5)  # row 0's largest k2 is 0.6035
    torch.testing.assert_close(dropped, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert metrics["rollout_rs_seq_max_k2_max"] == pytest.approx(0.5 * math.log(3.0) ** 2, rel=1e-5)
    mean_k3, _ = _run("seq_mean_k3", 0.3)  # row 0: (0.9014 + 0.1931 + 0) / 3 = 0.3648 > 0.3
    torch.testing.assert_close(mean_k3, dropped)


def test_options_chain_and_every_one_must_pass():
    mask, metrics = _run("token_k2,seq_mean_k1", "0.5,0.8_1.25")
    torch.testing.assert_close(mask, torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))
    assert {"rollout_rs_token_k2_mean", "rollout_rs_seq_mean_k1_mean"} <= set(metrics)
    tight, _ = _run("token_k2,seq_mean_k1", "0.5,0.9_1.1")  # 1.145 leaves [0.9, 1.1]: row 0 goes whole
    torch.testing.assert_close(tight, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))


@pytest.mark.parametrize("options, threshold, message", [
    ("token_k4", 1.0, "not a rejection option"),
    ("token_k1", None, "needs rollout_rs_threshold"),
    ("token_k2,seq_sum_k2,seq_max_k3", "1,2", "gives 2 thresholds for 3"),
    ("token_k2", "0.5_2", "k2/k3 options take one upper bound"),
    ("token_k1", "2_0.5", "lower <= upper"),
    ("token_k1", "abc", "not a positive number"),
    ("seq_max_k2", -1.0, "must be positive"),
])
def test_bad_specifications_are_refused(options, threshold, message):
    with pytest.raises(ValueError, match=message):
        parse_rollout_rs(options, threshold)


def test_thresholds_are_shared_or_given_per_option():
    shared = parse_rollout_rs("token_k2, seq_max_k3,token_k2", 0.7)
    assert list(shared) == ["token_k2", "seq_max_k3"] and shared["seq_max_k3"].upper == 0.7
    per_option = parse_rollout_rs("token_k1,token_k3", "0.5_2.0,0.1")
    assert per_option["token_k1"].lower == pytest.approx(math.log(0.5)) and per_option["token_k3"].lower is None
