"""validate_config rules; every batch-size message carries both numbers."""

from __future__ import annotations

import logging
import sys

import pytest

from hybridrl.config import ConfigError, load_config, resolve_micro_batch_size_per_gpu, validate_config

GRPO = [
    "algorithm.adv_estimator=grpo", "data.train_batch_size=256", "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
]  # fmt: skip


def problems(overrides: list[str], world_size: int = 1) -> str:
    with pytest.raises(ConfigError) as err:
        validate_config(load_config(GRPO + overrides), world_size)
    return str(err.value)


def test_valid_grpo_config_passes():
    validate_config(load_config(GRPO), world_size=8)  # 64 x 5 / 8 = 40 rows per device, 40 % 8 == 0


def test_mini_must_divide_train_with_suggestions():
    assert "actor_rollout_ref.actor.ppo_mini_batch_size (96) must divide data.train_batch_size (256); try 64 or 128" in problems(
        ["actor_rollout_ref.actor.ppo_mini_batch_size=96"]
    )


def test_mini_larger_than_train():
    assert "ppo_mini_batch_size (512) must be <= data.train_batch_size (256); both count prompts; try 256" in problems(
        ["actor_rollout_ref.actor.ppo_mini_batch_size=512"]
    )


def test_micro_must_divide_per_device_mini():
    # 256 x 5 / 8 = 160 rows per device; 48 does not divide it, 40 and 80 do
    message = problems(["actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48"], 8)
    assert "ppo_micro_batch_size_per_gpu (48) must divide the per-device mini batch" in message
    assert "(256 x 5 / 8 = 160 rows); try 40 or 80" in message


def test_dynamic_batching_needs_no_micro_batch_but_a_positive_budget():
    dynamic = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
               "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"]
    cfg = load_config(GRPO + dynamic)
    validate_config(cfg, world_size=8)
    assert cfg.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz and cfg.critic.use_dynamic_bsz  # verl's ${...} links
    message = problems(dynamic + ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0"])
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu (0) must be a positive token count" in message
    assert "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu (0)" in message  # follows the actor's budget


def test_dtype_keys_are_checked_by_name():
    message = problems(["actor_rollout_ref.actor.fsdp_config.model_dtype=fp33",
                        "actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:bf17,reduce:fp32}"])
    assert "actor_rollout_ref.actor.fsdp_config.model_dtype='fp33' is not a dtype; use one of fp32" in message
    assert "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype='bf17' is not a dtype" in message
    assert "mixed_precision has unknown key(s) ['reduce']; accepted: param_dtype, reduce_dtype, buffer_dtype" in message
    validate_config(load_config(GRPO + ["actor_rollout_ref.actor.fsdp_config.mixed_precision="
                                        "{param_dtype:bf16,reduce_dtype:fp32,buffer_dtype:fp32}"]))


def test_train_rows_divisible_by_devices():
    message = problems(["data.train_batch_size=255", "actor_rollout_ref.actor.ppo_mini_batch_size=51"], 2)
    assert "(255 x 5 = 1275 rows) must be divisible by the number of devices (2)" in message


def test_micro_both_and_neither():
    both = problems(["actor_rollout_ref.rollout.log_prob_micro_batch_size=64"])
    assert "log_prob_micro_batch_size (64) and actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu (16) are both set" in both
    neither = problems(["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null",
                        "actor_rollout_ref.actor.use_kl_loss=true"])  # fmt: skip
    assert "set actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu" in neither
    assert "set actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu" in neither  # ref needed by use_kl_loss


def test_resolve_micro_batch_size_per_gpu():
    assert resolve_micro_batch_size_per_gpu(64, None, 8, "a.micro") == 8
    assert resolve_micro_batch_size_per_gpu(None, 4, 8, "a.micro") == 4
    assert resolve_micro_batch_size_per_gpu(None, None, 8, "a.micro") is None
    with pytest.raises(ConfigError, match=r"a.micro \(64\) and a.micro_per_gpu \(4\) are both set"):
        resolve_micro_batch_size_per_gpu(64, 4, 8, "a.micro")
    with pytest.raises(ConfigError, match=r"a.micro \(4\) is a global row count split over 8 devices"):
        resolve_micro_batch_size_per_gpu(4, None, 8, "a.micro")


ACTOR_SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"


def test_batch_rules_divide_by_the_data_parallel_size_with_sequence_parallelism():
    # 4 ranks, sp 2: data-parallel size 2. 256 x 5 / 2 = 640 rows split fine; per rank 64 x 5 / 2 = 160 rows
    validate_config(load_config(GRPO + [f"{ACTOR_SP}=2"]), 4)
    message = problems(["data.train_batch_size=255", "actor_rollout_ref.actor.ppo_mini_batch_size=51", f"{ACTOR_SP}=2"], 4)
    assert ("(255 x 5 = 1275 rows) must be divisible by the data-parallel size 2 (4 ranks / "
            f"{ACTOR_SP} 2); change data.train_batch_size or the device count or {ACTOR_SP}") in message
    assert (f"ppo_mini_batch_size x rollout.n (51 x 5 = 255 rows) must be divisible by the data-parallel size 2 "
            f"(4 ranks / {ACTOR_SP} 2); change actor_rollout_ref.actor.ppo_mini_batch_size or "
            f"actor_rollout_ref.rollout.n, or {ACTOR_SP}") in message
    message = problems(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48", f"{ACTOR_SP}=2"], 4)
    assert ("ppo_micro_batch_size_per_gpu (48) must divide the per-rank mini batch: actor_rollout_ref.actor."
            "ppo_mini_batch_size x rollout.n / data-parallel size (64 x 5 / 2 = 160 rows; 4 ranks / "
            f"{ACTOR_SP} 2); try 40 or 80") in message


def test_global_micro_batch_is_split_over_the_data_parallel_size():
    # 8 ranks, sp 4: data-parallel size 2, so a global micro batch of 2 gives 1 row per rank and 1 is too few
    validate_config(load_config(GRPO + [f"{ACTOR_SP}=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null",
                                        "actor_rollout_ref.rollout.log_prob_micro_batch_size=2"]), 8)
    message = problems([f"{ACTOR_SP}=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null",
                        "actor_rollout_ref.rollout.log_prob_micro_batch_size=1"], 8)
    assert ("actor_rollout_ref.rollout.log_prob_micro_batch_size (1) is a global row count split over the "
            f"data-parallel size 2 (8 ranks / {ACTOR_SP} 4) and must be >= 2") in message


def test_critic_batch_rules_use_the_critics_ranks_and_size():
    gae = ["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=8"]
    validate_config(load_config(GRPO + gae + ["critic.ulysses_sequence_parallel_size=2"]), 8)
    # the critic's 3 ranks of its own (not the actor's 1): 64 x 5 = 320 rows do not split over 3
    message = problems(gae + ["actor_rollout_ref.actor.device_ids=[0]", "critic.device_ids=[1,2,3]"], 1)
    assert "critic.ppo_mini_batch_size x rollout.n (64 x 5 = 320 rows) must be divisible by the number of devices (3)" in message


def test_critic_rules_only_when_enabled():
    validate_config(load_config(GRPO), 1)  # grpo: critic auto-disabled, its micro batch is not needed
    message = problems(["critic.enable=true"])
    assert "set critic.ppo_micro_batch_size_per_gpu" in message
    gae = ["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=8", "critic.ppo_mini_batch_size=96"]
    assert "critic.ppo_mini_batch_size (96) must divide data.train_batch_size (256)" in problems(gae)


@pytest.mark.parametrize(("estimator", "meaning"), [
    ("grpo", "each advantage is the response's raw score (a group of one has mean 0 and std 1)"),
    ("rloo", "each advantage is the response's raw score"),
    ("rloo_vectorized", "every advantage is 0"),
])
def test_group_estimators_with_one_response_run_as_verl_with_a_warning(estimator, meaning, caplog):
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        cfg = load_config(GRPO + ["actor_rollout_ref.rollout.n=1", f"algorithm.adv_estimator={estimator}"])
    validate_config(cfg, world_size=1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"algorithm.adv_estimator={estimator} with actor_rollout_ref.rollout.n=1: {meaning}")
    caplog.clear()
    load_config(GRPO)  # n=5: no warning
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


OTB = ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"]


@pytest.mark.parametrize("estimator", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_token_baseline_needs_sum_pi_squared_from_the_actor(estimator):
    validate_config(load_config(GRPO + OTB + [f"algorithm.adv_estimator={estimator}"]), world_size=8)
    assert (f"algorithm.adv_estimator={estimator} needs actor_rollout_ref.actor.calculate_sum_pi_squared=true (got "
            "false)") in problems([f"algorithm.adv_estimator={estimator}"])
    bypass = problems(OTB + [f"algorithm.adv_estimator={estimator}", "algorithm.rollout_correction.bypass_mode=true"])
    assert "algorithm.rollout_correction.bypass_mode=true: bypass mode skips the actor's old-log-prob forward" in bypass
    assert "set bypass_mode=false" in bypass and "calculate_sum_pi_squared" not in bypass
    validate_config(load_config(GRPO + OTB), world_size=8)  # Σπ² without OTB: computed, read by nothing else


def test_token_baseline_with_one_response_runs_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        load_config(GRPO + OTB + ["actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=optimal_token_baseline"])
    assert any("each advantage is the response's reward-to-go" in r.getMessage() for r in caplog.records)


def test_value_rules():
    message = problems([
        "algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.do_sample=false",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.actor.kl_loss_type=k4",
        "algorithm.kl_penalty=k3+", "actor_rollout_ref.actor.loss_agg_mode=mean", "data.truncation=cut",
        "trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt/step_3",
        "actor_rollout_ref.rollout.gpu_memory_utilization=1.5", "trainer.critic_warmup=-1",
        "actor_rollout_ref.actor.optim.lr=-1", "trainer.logger=[console,wandbb]", "reward_model.num_workers=0",
    ])  # fmt: skip
    for expected in [
        "remax needs actor_rollout_ref.rollout.do_sample=true",
        "val_kwargs.do_sample=true needs val_kwargs.temperature > 0 (got 0.0)",
        "actor_rollout_ref.actor.kl_loss_type='k4' is not a KL estimator",
        "actor_rollout_ref.actor.loss_agg_mode='mean' is not one of token-mean|token-sum|seq-mean-token-sum",
        "data.truncation='cut' is not one of error|left|right|middle",
        "trainer.resume_from_path pointing at a checkpoint folder named global_step_N (got '/ckpt/step_3')",
        "gpu_memory_utilization (1.5) must be in (0, 1]",
        "trainer.critic_warmup (-1) must be >= 0",
        "actor_rollout_ref.actor.optim.lr (-1.0) must be >= 0",
        "unknown backend(s) ['wandbb']",
        "reward_model.num_workers (0) must be >= 1",
    ]:
        assert expected in message, expected
    assert "algorithm.kl_penalty" not in message  # k3+ is valid


def test_validate_problems_are_all_listed():
    message = problems(["actor_rollout_ref.actor.ppo_mini_batch_size=96", "data.truncation=cut"])
    assert message.startswith("2 config problem(s):")


def test_world_size_below_one_says_what_it_counts():
    message = problems([], world_size=0)
    assert "world_size (0) must be >= 1: it is the number of ranks training the actor" in message


def test_local_launcher_needs_one_node():
    message = problems(["trainer.launcher=local", "trainer.nnodes=2"])
    assert "trainer.launcher=local runs on one node but trainer.nnodes=2; set trainer.launcher=ray" in message


@pytest.mark.parametrize("override", ["ray_kwargs.ray_init.adress=auto", "ray_init.adress=auto"])  # older spelling too
def test_ray_init_typo_gets_a_did_you_mean(override):
    pytest.importorskip("ray")
    message = problems([override])
    assert ("ray_kwargs.ray_init.adress is not an argument of ray.init; did you mean 'ray_kwargs.ray_init.address'?"
            in message)


def test_ray_init_takes_rays_arguments_private_ones_and_client_options():
    pytest.importorskip("ray")
    validate_config(load_config(GRPO + ["ray_kwargs.ray_init.num_cpus=2",
                                        "+ray_kwargs.ray_init.include_dashboard=false",
                                        "+ray_kwargs.ray_init._temp_dir=/tmp/ray"]))
    validate_config(load_config(GRPO + ["+ray_kwargs.ray_init.address=ray://head:10001",
                                        "+ray_kwargs.ray_init.allow_multiple=true"]))  # the client builder's option


def test_ray_init_keys_are_not_checked_without_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed: the launcher reports that itself
    validate_config(load_config(GRPO + ["ray_kwargs.ray_init.adress=auto"]))


def test_scoring_deadlines_and_retries_are_checked():
    message = problems(["reward_model.reward_fn_timeout_s=0", "critic.remote.max_retries=-1"])
    for expected in ["reward_model.reward_fn_timeout_s=0.0 is out of range: it must be > 0",
                     "critic.remote.max_retries=-1 is out of range: it must be >= 0"]:
        assert expected in message, expected
    message = problems(["reward_model.remote.timeout_s=nan", "critic.remote.backoff_s=inf"])
    for expected in ["reward_model.remote.timeout_s=nan is out of range: it must be > 0",
                     "critic.remote.backoff_s=inf is out of range: it must be >= 0"]:
        assert expected in message, expected
    validate_config(load_config(GRPO + ["reward_model.reward_fn_timeout_s=null"]), 1)  # null: no limit
