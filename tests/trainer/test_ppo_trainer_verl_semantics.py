"""PPOTrainer.fit as verl runs it: val_only, validation before training after a resume, timing_s/old_log_prob
when the update supplies the old log-probs, and the optimal token baseline with verl's script keys."""

from __future__ import annotations

import json
import os

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.logging.file_tracker import read_metrics_jsonl
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides

VALIDATION_KEY = "val-core/arithmetic/reward/mean@1"


def lines(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_val_only_validates_once_and_trains_nothing(tmp_path, arith_model_dir, arithmetic_files):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(
        arith_model_dir, arithmetic_files, out, extra=["trainer.val_before_train=true", "trainer.val_only=true"])))
    before = {k: v.clone() for k, v in local_worker(trainer).actor.model.state_dict().items()}
    metrics = trainer.fit()
    assert VALIDATION_KEY in metrics and trainer.global_step == 0
    assert [(r["step"], VALIDATION_KEY in r) for r in lines(out)] == [(0, True)]
    after = local_worker(trainer).actor.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_validation_before_training_runs_after_a_resume_at_the_resumed_step(tmp_path, arith_model_dir,
                                                                            arithmetic_files):
    out = str(tmp_path)
    common = ["trainer.save_freq=2", "trainer.val_before_train=true"]
    PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=2, extra=common))).fit()
    PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=3,
                                              extra=common + ["trainer.resume_mode=auto"]))).fit()
    assert [r["step"] for r in lines(out)] == [0, 1, 2, 2, 3]  # verl validates before training on every start
    merged = read_metrics_jsonl(os.path.join(out, "metrics.jsonl"))
    assert VALIDATION_KEY in merged[2] and "actor/pg_loss" in merged[2]  # the step's record keeps its training keys


def test_old_log_prob_timing_is_zero_when_the_update_supplies_them(tmp_path, arith_model_dir, arithmetic_files,
                                                                  caplog):
    reused, computed = str(tmp_path / "reused"), str(tmp_path / "computed")
    # one mini-batch of the whole step (8 prompts): the update's first forward gives the old log-probs
    PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, reused,
                                              extra=["actor_rollout_ref.actor.ppo_mini_batch_size=8"]))).fit()
    assert [r["timing_s/old_log_prob"] for r in lines(reused)] == [0.0, 0.0]
    assert caplog.text.count("timing_s/old_log_prob is 0: the actor's update supplies the old log-probs") == 1
    PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, computed))).fit()  # 2 mini-batches
    assert all(r["timing_s/old_log_prob"] > 0 for r in lines(computed))


# verl's examples/otb_trainer/run_qwen3_8b_fsdp.sh (August 2026) and run_qwen2_5-7b.sh (January), at tiny sizes
OTB_SCRIPT_KEYS = [
    "algorithm.adv_estimator=optimal_token_baseline", "algorithm.use_kl_in_reward=False",
    "actor_rollout_ref.model.use_remove_padding=True", "actor_rollout_ref.model.use_fused_kernels=False",
    "actor_rollout_ref.actor.use_dynamic_bsz=True", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
    "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.calculate_sum_pi_squared=True", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=64", "trainer.balance_batch=True",
    "trainer.critic_warmup=0", "actor_rollout_ref.actor.ppo_mini_batch_size=8",  # one mini-batch: on-policy
]


DIGIT_COUNT_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(sum(ch.isdigit() for ch in solution_str))
"""


def test_optimal_token_baseline_run_with_verls_script_keys(tmp_path, arith_model_dir, arithmetic_files):
    """The old_log_prob pass runs although the update is on-policy (the advantages need its Σπ²), and the
    advantages the update sees are the OTB's of the batch's own old log-probs, Σπ² and groups."""
    from hybridrl.algorithms import compute_optimal_token_baseline_advantage

    out, reward = str(tmp_path / "run"), tmp_path / "reward.py"
    reward.write_text(DIGIT_COUNT_REWARD)
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, extra=OTB_SCRIPT_KEYS + [
        f"custom_reward_function.path={reward}"])))
    seen = []
    advantages_phase = trainer.advantages
    trainer.advantages = lambda batch, metrics: seen.append(advantages_phase(batch, metrics)) or seen[-1]
    before = {k: v.clone() for k, v in local_worker(trainer).actor.model.state_dict().items()}
    trainer.fit()
    records = lines(out)
    assert all(r["timing_s/old_log_prob"] > 0 and abs(r["actor/pg_loss"]) < float("inf") for r in records)
    proxies = ("proxy1_signal_strength", "proxy2_total_power", "proxy3_pure_noise", "expected_a_squared", "expected_w")
    for record in records:  # verl's gradient-variance proxies, logged wherever Σπ² is computed
        assert all(record[f"variance_proxy/{name}"] >= 0 for name in proxies)
        assert record["variance_proxy/proxy1_signal_strength"] == pytest.approx(record["actor/grad_norm"] ** 2)
    after = local_worker(trainer).actor.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert len(seen) == 2
    for batch in seen:
        mask = batch["response_mask"].bool()
        sum_pi_squared = batch["sum_pi_squared"]
        assert ((sum_pi_squared[mask] > 0) & (sum_pi_squared[mask] <= 1)).all()
        want, _ = compute_optimal_token_baseline_advantage(batch["token_level_rewards"], batch["response_mask"],
                                                           batch["uid"], batch["old_log_probs"], sum_pi_squared)
        torch.testing.assert_close(batch["advantages"], want)
        assert batch["advantages"].abs().sum() > 0  # rewards differ within groups: the baseline has work to do
