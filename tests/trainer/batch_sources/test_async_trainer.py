"""The asynchronous trainer (trainer.v1.trainer_mode=colocate_async) on one CPU process: with
max_off_policy_threshold=1 it trains what the synchronous trainer trains; with more, the long tail of a step is
parked (tokens kept), resumed after the weight sync and trained later; checkpoints lose and repeat nothing."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.trainer.batch_sources.async_trainer import AsyncPPOTrainer
from hybridrl.trainer.batch_sources.trajectory_buffer import RUNNING
from hybridrl.trainer.main_ppo import make_trainer
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.batch import Batch
from tests.trainer.helpers import local_worker, tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics, stable

ASYNC_ONLY = ("training/off_policy/", "fully_async/")
ENGINE_SPEED = ("rollout/prefill_time_s", "rollout/decode_time_s", "rollout/mean_decode_step_s",
                "rollout/graph_capture_s")


def overrides(tmp_path, model_dir, files, name: str, extra: list[str], steps: int = 3) -> list[str]:
    base = tiny_run_overrides(model_dir, files, str(tmp_path / name), steps=steps,
                              extra=["actor_rollout_ref.rollout.name=hybrid"] + extra)
    return [o for o in base if o != "actor_rollout_ref.rollout.name=hf"]


class RecordingTrainer(AsyncPPOTrainer):
    """The asynchronous trainer, recording the prompt groups (uids) each step trains."""

    def __init__(self, *args, burst: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.trained: dict[int, list[str]] = {}
        if burst is not None:  # decode bursts shorter than a response: the step's tail is cut mid-decode
            engine = local_worker(self).rollout.backend
            engine.max_decode_burst = burst
            if engine.core is not None:
                engine.core.max_decode_burst = burst

    def generate(self, prompts: Batch, metrics: dict[str, float], round_index: int = 0) -> Batch:
        batch = super().generate(prompts, metrics, round_index)
        self.trained[self.global_step] = sorted(set(batch["uid"]))
        pool = local_worker(self).rollout.pool
        running = {g.group_id for g in self.buffer.groups.values() if g.status == RUNNING}
        assert set(pool.groups) <= running | self.buffer.cancelled  # nothing generates for a group left behind
        return batch


def comparable(record: dict) -> dict:
    return {k: v for k, v in stable(record).items() if not k.startswith(ASYNC_ONLY) and k not in ENGINE_SPEED}


def test_make_trainer_picks_the_loop_and_the_sync_trainer_refuses_async_modes(tmp_path, arith_model_dir,
                                                                                 arithmetic_files):
    cfg = load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "pick",
                                ["trainer.v1.trainer_mode=colocate_async"]))
    with pytest.raises(Exception, match="make_trainer"):
        PPOTrainer(cfg)
    assert type(make_trainer(cfg)) is AsyncPPOTrainer


def test_threshold_one_gives_the_synchronous_run(tmp_path, arith_model_dir, arithmetic_files):
    """Staleness 0 (verl issue #6780): the same prompts, samples, seeds and row keys, so the same metrics and
    weights as the synchronous trainer; the off-policy metrics say every trajectory is fresh."""
    sync_cfg = load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "sync", []))
    sync = PPOTrainer(sync_cfg)
    sync.fit()
    async_cfg = load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "async", [
        "trainer.v1.trainer_mode=colocate_async", "trainer.v1.sampler.max_off_policy_threshold=1"]))
    trainer = make_trainer(async_cfg)
    trainer.fit()
    want, got = read_metrics(str(tmp_path / "sync")), read_metrics(str(tmp_path / "async"))
    assert len(got) == len(want) == 3
    for step, (record, reference) in enumerate(zip(got, want), start=1):
        assert comparable(record) == pytest.approx(comparable(reference), rel=1e-6, abs=1e-7), step
        assert record["training/off_policy/trajectory_staleness/max"] == 0.0
        assert record["training/off_policy/trajectory_spans/max"] == 1.0
        assert record["fully_async/partial/total_partial_num"] == 0.0
    for (name, a), b in zip(local_worker(trainer).actor.model.named_parameters(),
                            local_worker(sync).actor.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


PARKING = ["trainer.v1.trainer_mode=colocate_async", "trainer.v1.sampler.max_off_policy_threshold=2",
           "data.max_response_length=48", "trainer.v1.sampler.max_off_policy_strategy=wait"]


@pytest.mark.parametrize("strategy", ["wait", "drop"])
def test_the_tail_is_parked_resumed_after_the_sync_and_trained_later(tmp_path, arith_model_dir, arithmetic_files,
                                                                     strategy, caplog):
    """Two batches in flight, responses up to 48 tokens ending at EOS, decode bursts of 2
    tokens: once 8 groups finished the rest are parked mid-response;
    they resume at the next version and train at a later step (spans of 2 versions), each group exactly once,
    never staler than the threshold allows: `wait` holds a step for a group that would exceed it, `drop` evicts
    such a group as soon as it can no longer train in time, cancelling it in the engine if it still runs (a new
    prompt takes its place)."""
    extra = PARKING + [f"trainer.v1.sampler.max_off_policy_strategy={strategy}"]
    cfg = load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "park", extra, steps=4))
    trainer = RecordingTrainer(cfg, burst=2)
    trainer.fit()
    records = read_metrics(str(tmp_path / "park"))
    uids = [uid for step in sorted(trainer.trained) for uid in trainer.trained[step]]
    assert len(uids) == len(set(uids)) == 4 * 8
    assert max(r["fully_async/partial/total_partial_num"] for r in records) > 0
    assert max(r["training/off_policy/trajectory_spans/max"] for r in records) == 2.0
    assert all(r["training/off_policy/trajectory_staleness_worst/max"] <= 1.0 for r in records)
    evicted = sum(r["training/off_policy/evicted_samples"] for r in records)
    cancelled = sum(r["training/off_policy/evicted_running_samples"] for r in records)
    assert (evicted, cancelled) == (0.0, 0.0) if strategy == "wait" else evicted >= cancelled > 0.0
    notices = caplog.text.count("max_off_policy_strategy=drop evicted")
    assert notices == (0 if strategy == "wait" else 1)  # once a run, naming the fix
    assert strategy == "wait" or "max_off_policy_strategy=wait trains them" in caplog.text


def test_kept_kv_resumes_the_parked_tail_without_re_prefilling_it(tmp_path, arith_model_dir, arithmetic_files):
    """recompute_kv_cache_after_weight_updates=false: the engine keeps its KV cache through the update (it never
    sleeps once awake) and the resumed requests read their KV from it, so the run prefills far fewer tokens
    than the same run rebuilding the KV; every group still trains exactly once."""
    prefilled = {}
    for name, extra in {"rebuilt": [], "kept": ["actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates=false"]}.items():
        trainer = RecordingTrainer(load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, name,
                                                         PARKING + extra)), burst=2)
        trainer.fit()
        records = read_metrics(str(tmp_path / name))
        uids = [uid for step in sorted(trainer.trained) for uid in trainer.trained[step]]
        assert len(uids) == len(set(uids)) == 3 * 8 and max(r["fully_async/partial/total_partial_num"] for r in records)
        prefilled[name] = sum(r["rollout/prefill_tokens"] for r in records)
        rollout = local_worker(trainer).rollout
        assert rollout.asleep is (name == "rebuilt") and (rollout.backend.runner.kv_cache is None) is rollout.asleep
    assert prefilled["kept"] < 0.75 * prefilled["rebuilt"]


def test_resume_mid_async_loses_and_repeats_no_prompt(tmp_path, arith_model_dir, arithmetic_files):
    """A checkpoint after step 2 with groups finished and in flight: the resumed run trains steps 3-4 from the
    restored buffer (finished groups as they were, running ones re-issued), so across both runs no group trains
    twice, and every prompt drawn before the checkpoint is trained or still in the buffer at the end."""
    extra = PARKING + ["trainer.save_freq=2", "trainer.test_freq=2"]  # validation between parks too
    first = RecordingTrainer(load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "ckpt", extra,
                                                   steps=2)), burst=2)
    first.fit()
    saved = {g.group_id: g.status for g in first.buffer.groups.values()}
    assert "finished" in saved.values() or "running" in saved.values()
    resumed = RecordingTrainer(load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "ckpt", extra,
                                                     steps=4)), burst=2)
    resumed.fit()
    assert sorted(resumed.trained) == [3, 4]
    before = [uid for step in (1, 2) for uid in first.trained[step]]
    after = [uid for step in (3, 4) for uid in resumed.trained[step]]
    assert len(before + after) == len(set(before + after)) == 4 * 8
    left = set(resumed.buffer.groups)
    assert set(saved) <= set(after) | left  # nothing saved was lost
    drawn = {f"{index}-{row}" for index in range(1, resumed.batches_queued + 1) for row in range(8)}
    assert drawn == set(before) | set(after) | left


class UidRecordingTrainer(AsyncPPOTrainer):
    def generate(self, prompts: Batch, metrics: dict[str, float], round_index: int = 0) -> Batch:
        batch = super().generate(prompts, metrics, round_index)
        self.trained = getattr(self, "trained", []) + [sorted(set(batch["uid"]))]
        return batch


def test_separate_async_on_two_cpu_ranks_generates_on_its_own_rank_while_the_actor_trains(
        tmp_path, arith_model_dir, arithmetic_files):
    """The rollout on rank 1, the actor on rank 0 (the local launcher's processes): generation runs on its
    thread between the weight handoffs and pauses for validation; every step trains 8 distinct groups and reports
    the idle ratios."""
    extra = ["trainer.v1.trainer_mode=separate_async", "trainer.n_gpus_per_node=2",
             "actor_rollout_ref.actor.device_ids=[0]", "actor_rollout_ref.rollout.device_ids=[1]",
             "trainer.v1.separate_async.parameter_sync_step=2", "actor_rollout_ref.rollout.dtype=float32",
             "trainer.v1.sampler.max_off_policy_threshold=2", "trainer.test_freq=2"]
    trainer = UidRecordingTrainer(load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "split", extra)))
    assert sorted(trainer.roles.groups.by_name) == ["actor", "rollout"]
    trainer.fit()
    records = read_metrics(str(tmp_path / "split"))
    assert [r["training/global_step"] for r in records] == [1, 2, 3]
    uids = [uid for step in trainer.trained for uid in step]
    assert len(trainer.trained) == 3 and len(uids) == len(set(uids)) == 3 * 8
    for record in records:
        assert record["perf/update_weights_gb"] > 0  # the handoff into the rollout's own rank
        assert 0.0 <= record["fully_async/rollouter/idle_ratio"] <= 1.0
        assert record["fully_async/trainer/idle_ratio"] >= 0.0
        assert record["training/off_policy/trajectory_staleness_worst/max"] <= 1.0
    assert [any(k.startswith("val-core/") for k in r) for r in records] == [False, True, True]  # step 2, last step


def test_stale_batches_get_rollout_correction_weights(tmp_path, arith_model_dir, arithmetic_files):
    """Two batches in flight and a reward that moves the policy (lr 1e-2): from step 2 on the trained groups were
    sampled one version back, and the token IS weights π_old/π_rollout (TIS, capped at 2) spread out where the
    fresh first step's stay at the kernels' mismatch."""
    reward = tmp_path / "length_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return float(len(solution_str) % 5) / 4.0\n")
    extra = ["trainer.v1.trainer_mode=colocate_async", "trainer.v1.sampler.max_off_policy_threshold=2",
             "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0",
             f"custom_reward_function.path={reward}", "data.max_response_length=48",
             "actor_rollout_ref.actor.optim.lr=1e-2"]
    make_trainer(load_config(overrides(tmp_path, arith_model_dir, arithmetic_files, "tis", extra))).fit()
    first, *later = read_metrics(str(tmp_path / "tis"))
    assert first["training/off_policy/trajectory_staleness/max"] == 0.0
    assert first["rollout_corr/rollout_is_std"] < 0.01
    for record in later:
        assert record["training/off_policy/trajectory_staleness/max"] == 1.0
        assert record["rollout_corr/rollout_is_std"] > 0.05 and record["rollout_corr/rollout_is_max"] <= 2.0
