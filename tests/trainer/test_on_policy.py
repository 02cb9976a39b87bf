"""The on-policy shortcut: old log-probs from the update's own forward instead of a separate pass."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics, stable
from tests.workers.helpers import build_actor, ragged_batch

ONE_MINI_BATCH = ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.use_kl_loss=true",
                  "actor_rollout_ref.actor.kl_loss_coef=0.1"]


def run(tmp_path, model_dir, files, name: str, extra: list[str]) -> tuple[PPOTrainer, list[dict]]:
    out = str(tmp_path / name)
    trainer = PPOTrainer(load_config(tiny_run_overrides(model_dir, files, out, extra=ONE_MINI_BATCH + extra)))
    trainer.fit()
    return trainer, read_metrics(out)


def test_shortcut_gives_the_recomputed_run(tmp_path, arith_model_dir, arithmetic_files):
    shortcut, fast = run(tmp_path, arith_model_dir, arithmetic_files, "reuse", [])
    recompute, slow = run(tmp_path, arith_model_dir, arithmetic_files, "recompute",
                          ["actor_rollout_ref.actor.reuse_on_policy_log_prob=false"])
    for got, want in zip(fast, slow):
        assert got["timing_s/old_log_prob"] == 0.0 and want["timing_s/old_log_prob"] > 0  # skipped: 0, as dashboards expect
        got, want = stable(got), stable(want)
        assert set(got) == set(want), set(got) ^ set(want)
        for key in ("actor/entropy", "training/rollout_probs_diff_mean", "training/rollout_log_probs_diff_max",
                    "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/score/mean"):
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    for (name, a), b in zip(local_worker(shortcut).actor.model.named_parameters(),
                            local_worker(recompute).actor.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("extra", [
    ["actor_rollout_ref.actor.ppo_mini_batch_size=4"],  # two optimizer steps per RL step
    ["actor_rollout_ref.actor.ppo_epochs=2"],
    ["algorithm.use_kl_in_reward=true"],  # the KL penalty needs old log-probs before the advantages
    ["actor_rollout_ref.actor.reuse_on_policy_log_prob=false"],
])
def test_off_policy_updates_keep_the_old_log_prob_pass(tmp_path, arith_model_dir, arithmetic_files, extra):
    _, records = run(tmp_path, arith_model_dir, arithmetic_files, "off", extra + ["trainer.total_training_steps=1"])
    assert "timing_s/old_log_prob" in records[0] and "actor/entropy" in records[0]


def test_actor_refuses_a_batch_without_old_log_probs_over_several_mini_batches(arith_model_dir):
    actor = build_actor(arith_model_dir, ["actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    batch = ragged_batch(8)
    batch.pop("old_log_probs")
    with pytest.raises(ValueError, match="reuse_on_policy_log_prob=false"):
        actor.update_actor(batch)


def test_async_reward_scores_on_a_thread_and_gives_the_synchronous_run(tmp_path, arith_model_dir, arithmetic_files,
                                                                       monkeypatch):
    import threading

    from hybridrl.workers.reward import RewardWorker

    threads = []
    original = RewardWorker.compute_scores

    def recording(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RewardWorker, "compute_scores", recording)  # records the scoring thread, then scores
    _, sync = run(tmp_path, arith_model_dir, arithmetic_files, "sync", [])
    _, background = run(tmp_path, arith_model_dir, arithmetic_files, "async",
                        ["reward_model.launch_reward_fn_async=true"])
    assert threads[:2] == ["MainThread"] * 2 and all(t.startswith("hybridrl-reward") for t in threads[2:])
    assert len(threads) == 4
    for got, want in zip(background, sync):
        assert stable(got) == pytest.approx(stable(want), rel=1e-6, abs=1e-7)
        assert "timing_s/reward" in got


def test_reward_worker_processes_give_the_in_process_run(tmp_path, arith_model_dir, arithmetic_files, monkeypatch):
    """reward_model.num_workers=2 (beside launch_reward_fn_async): rows scored in two spawned processes give the
    in-process run's metrics, and the processes are gone when fit returns."""
    from hybridrl.rewards.pool import ScoringPool

    pooled = []
    original = ScoringPool.score
    monkeypatch.setattr(ScoringPool, "score", lambda self, *rows: pooled.append(len(rows[0])) or original(self, *rows))
    _, inline = run(tmp_path, arith_model_dir, arithmetic_files, "inline", [])
    trainer, workers = run(tmp_path, arith_model_dir, arithmetic_files, "workers",
                           ["reward_model.num_workers=2", "reward_model.launch_reward_fn_async=true"])
    assert len(pooled) == 2 and pooled[0] > 0  # every step's batch went through the pool
    assert trainer.roles.reward.pool._executor is None  # closed with the run
    for got, want in zip(workers, inline):
        assert stable(got) == pytest.approx(stable(want), rel=1e-6, abs=1e-7)
