"""Rollout correction in the trainer's step: the decoupled batch work, bypass mode's missing pass, the metrics
logged with correction off, and verl's three spellings of truncated importance sampling."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.config import ConfigError, config_to_dict, load_config
from hybridrl.trainer.correction import bypass_old_log_probs, checked_settings, decoupled_correction
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.batch import Batch
from hybridrl.workers.update_correction import correction_settings
from tests.trainer.helpers import tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics

# Two mini-batches per step: the on-policy shortcut is off, so the old_log_prob pass runs unless bypassed.
TWO_MINI_BATCHES = ["actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.total_training_steps=1"]


def two_rows() -> Batch:
    """Row 0 has ratios ρ = π_old/π_rollout of e^0.5, e^-2, e^0.1 (its second token falls under 0.5); row 1 one
    token with ρ = e^1 and one padding column."""
    rollout = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -0.5, 0.0]])
    old = rollout + torch.tensor([[0.5, -2.0, 0.1], [1.0, 0.0, 0.0]])
    return Batch({"old_log_probs": old, "rollout_log_probs": rollout,
                  "response_mask": torch.tensor([[1, 1, 1], [1, 0, 0]])})


def settings(*overrides: str):
    return correction_settings(load_config(list(overrides)).algorithm.rollout_correction)


def test_decoupled_correction_filters_the_mask_and_hands_the_weights_to_the_loss():
    batch, metrics = two_rows(), {}
    out = decoupled_correction(batch, settings("algorithm.rollout_correction.rollout_is=token",
                                               "algorithm.rollout_correction.rollout_rs=token_k1",
                                               "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0"), metrics)
    # token_k1 keeps −log ρ in [log 0.5, log 2]: ρ in [0.5, 2], so e^-2 and e^1 go
    assert out["response_mask"].tolist() == [[1, 0, 1], [0, 0, 0]]
    expected = [[math.exp(0.5), math.exp(-2.0), math.exp(0.1)], [2.0, 0.0, 0.0]]  # min(ρ, 2) on the original mask
    torch.testing.assert_close(out["rollout_is_weights"], torch.tensor(expected))
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.5)
    assert metrics["rollout_corr/kl"] == pytest.approx(-(0.5 - 2.0 + 0.1 + 1.0) / 4)  # E[log π_rollout − log π_old]


def test_metrics_only_leaves_the_batch_as_it_was():
    batch, metrics = two_rows(), {}
    out = decoupled_correction(batch, settings(), metrics)
    assert out["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0]] and "rollout_is_weights" not in out
    assert {"rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token", "rollout_corr/log_ppl_abs_diff"} \
        <= set(metrics)
    assert not any("rollout_is_" in key for key in metrics)


def test_bypass_hands_the_rollout_log_probs_over_as_old_ones():
    batch = two_rows()
    batch.pop("old_log_probs")
    out = bypass_old_log_probs(batch)
    torch.testing.assert_close(out["old_log_probs"], out["rollout_log_probs"])
    with pytest.raises(ValueError, match="bypass_mode=true needs the rollout's log-probs"):
        bypass_old_log_probs(Batch({"response_mask": torch.ones(1, 2)}))


@pytest.mark.parametrize("override, phrase", [
    ("algorithm.rollout_correction.rollout_is_threshold=2.0_0.5", "bounds must be positive with lower <= upper"),
    ("algorithm.rollout_correction.rollout_is=tokens", "rollout_is='tokens' is not an IS level"),
    ("algorithm.rollout_correction.rollout_rs=token_k9", "token_k9"),
])
def test_bad_settings_are_config_errors_naming_the_key(override, phrase):
    with pytest.raises(ConfigError) as err:
        checked_settings(load_config(["algorithm.rollout_correction.rollout_rs_threshold=2.0", override]))
    assert "algorithm.rollout_correction." in str(err.value) and phrase in str(err.value)


def test_three_spellings_of_truncated_importance_sampling_are_one_config():
    """verl 0.5's actor key, verl 0.6.0's algorithm.rollout_is* keys and today's rollout_correction group."""
    spellings = [["+actor_rollout_ref.actor.tis_imp_ratio_cap=2.5"],
                 ["+algorithm.rollout_is=true", "+algorithm.rollout_is_threshold=2.5"],
                 ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.5"]]
    configs = [config_to_dict(load_config(keys)) for keys in spellings]
    assert configs[0] == configs[1] == configs[2]
    assert configs[0]["algorithm"]["rollout_correction"]["rollout_is"] == "token"


def run(tmp_path, model_dir, files, extra: list[str]):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(model_dir, files, out, extra=TWO_MINI_BATCHES + extra)))
    passes = []
    compute = trainer.roles.actor.compute_log_prob
    trainer.roles.actor.compute_log_prob = lambda batch: passes.append(len(batch)) or compute(batch)
    trainer.fit()
    return read_metrics(out)[0], passes


def test_mismatch_metrics_are_logged_with_correction_off(tmp_path, arith_model_dir, arithmetic_files):
    record, passes = run(tmp_path, arith_model_dir, arithmetic_files, [])
    assert passes == [32]  # the old_log_prob pass: 8 prompts x 4 samples
    for key in ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/chi2_token",
                "rollout_corr/chi2_seq", "training/rollout_log_probs_diff_mean"):
        assert math.isfinite(record[key]), key
    assert "rollout_corr/rollout_is_mean" not in record


def test_truncated_weights_spelled_as_verl_05_reach_the_run(tmp_path, arith_model_dir, arithmetic_files):
    record, passes = run(tmp_path, arith_model_dir, arithmetic_files, ["+actor_rollout_ref.actor.tis_imp_ratio_cap=2.0"])
    assert passes == [32]
    assert 0 < record["rollout_corr/rollout_is_mean"] <= record["rollout_corr/rollout_is_max"] <= 2.0


def test_bypass_mode_runs_no_old_log_prob_pass(tmp_path, arith_model_dir, arithmetic_files):
    record, passes = run(tmp_path, arith_model_dir, arithmetic_files, [
        "algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.rollout_is=token"])
    assert passes == [] and "timing_s/old_log_prob" not in record
    assert math.isfinite(record["actor/entropy"]) and math.isfinite(record["actor/pg_loss"])
    assert 0 < record["rollout_corr/rollout_is_mean"] and "rollout_corr/kl" in record  # π_θ against π_rollout
