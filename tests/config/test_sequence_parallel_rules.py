"""config.sequence_parallel_rules: sp divides each role's ranks; distillation and a LoRA reference keep theirs."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.config.sequence_parallel_rules import sequence_parallel_problems

ACTOR_SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
REF_SP = "actor_rollout_ref.ref.ulysses_sequence_parallel_size"
CRITIC_SP = "critic.ulysses_sequence_parallel_size"
GRPO = ["algorithm.adv_estimator=grpo", "data.train_batch_size=16", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]
GAE = [*GRPO, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4"]
KL = ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"]


def problems(overrides: list[str], world_size: int) -> list[str]:
    return sequence_parallel_problems(load_config(overrides), world_size)


@pytest.mark.parametrize(("overrides", "world_size"), [
    ([f"{ACTOR_SP}=2"], 4),
    ([f"{ACTOR_SP}=4", *KL], 4),  # the reference follows the actor's size
    ([f"{ACTOR_SP}=2", f"{REF_SP}=1", *KL], 2),
    ([f"{CRITIC_SP}=2", "critic.ppo_micro_batch_size_per_gpu=4", "algorithm.adv_estimator=gae"], 2),
    ([f"{CRITIC_SP}=2", "critic.device_ids=[2,3]", "actor_rollout_ref.actor.device_ids=[0]",
      "actor_rollout_ref.rollout.device_ids=[0]", "algorithm.adv_estimator=gae",
      "critic.ppo_micro_batch_size_per_gpu=4"], 1),  # the critic's own 2 ranks, the actor's 1
])
def test_accepted(overrides, world_size):
    validate_config(load_config(GRPO + overrides), world_size)


def test_one_rank_needs_sp_ranks():
    (message,) = problems([f"{ACTOR_SP}=2"], 1)
    assert message == (f"{ACTOR_SP}=2 needs at least 2 ranks, but the actor has 1: set trainer.n_gpus_per_node to a "
                       f"multiple of 2, or set {ACTOR_SP}=1")


def test_sp_must_divide_the_ranks():
    (message,) = problems([f"{ACTOR_SP}=4"], 6)
    assert message == (f"{ACTOR_SP}=4 must divide the actor's 6 ranks (each group of 4 consecutive ranks holds the "
                       f"same rows): set {ACTOR_SP}=3 or {ACTOR_SP}=6, or set trainer.n_gpus_per_node to a multiple of 4")
    (message,) = problems([f"{ACTOR_SP}=4", "actor_rollout_ref.actor.device_ids=[0,1]"], 2)
    assert message.endswith(f"or set {ACTOR_SP}=2")  # the largest size that fits
    assert "list a multiple of 4 devices in actor_rollout_ref.actor.device_ids" in message


def test_reference_and_critic_are_checked_on_their_own_ranks_when_used():
    assert problems([f"{ACTOR_SP}=1", f"{REF_SP}=4"], 2) == []  # no KL: no reference
    (message,) = problems([f"{ACTOR_SP}=1", f"{REF_SP}=4", *KL], 2)
    assert message.startswith(f"{REF_SP}=4 needs at least 4 ranks, but the reference has 2: set "
                              "trainer.n_gpus_per_node to a multiple of 4 (or give the reference 4 devices of its own "
                              "in actor_rollout_ref.ref.device_ids)")
    assert problems([f"{CRITIC_SP}=4", "algorithm.adv_estimator=grpo"], 2) == []  # no critic
    (message,) = problems([f"{CRITIC_SP}=4", "algorithm.adv_estimator=gae", "critic.device_ids=[2,3]"], 2)
    assert message == (f"{CRITIC_SP}=4 needs at least 4 ranks, but the critic has 2: list a multiple of 4 devices in "
                       f"critic.device_ids, or set {CRITIC_SP}=2")


def test_remote_critic_has_no_sequence_parallelism():
    (message,) = problems([f"{CRITIC_SP}=2", "algorithm.adv_estimator=gae", "critic.type=vllm_api",
                           "critic.model.path=http://127.0.0.1:8000"], 2)
    assert message.startswith(f"{CRITIC_SP}=2 has no effect: the critic is remote") and message.endswith(f"{CRITIC_SP}=1")


def test_distillation_runs_without_sequence_parallelism():
    distill = ["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=/m/teacher"]
    (message,) = problems([f"{ACTOR_SP}=2", *distill], 2)
    assert message == ("on-policy distillation with Ulysses sequence parallelism is not implemented "
                       f"(distillation.enabled=true with {ACTOR_SP}=2 and {REF_SP}=2): set {ACTOR_SP}=1 and "
                       f"{REF_SP}=1, or distillation.enabled=false")
    (message,) = problems([f"{REF_SP}=2", *distill], 2)  # the teachers take the reference's settings
    assert f"with {REF_SP}=2): set {REF_SP}=1, or distillation.enabled=false" in message
    assert problems(distill, 2) == []


def test_a_lora_reference_runs_with_the_actors_size():
    lora = [f"{ACTOR_SP}=2", f"{REF_SP}=1", "actor_rollout_ref.model.lora_rank=8", *KL]
    (message,) = problems(lora, 2)
    assert message.startswith(f"{REF_SP}=1 differs from {ACTOR_SP}=2; with LoRA (actor_rollout_ref.model.lora_rank=8)")
    assert f"set {REF_SP}=2 (or remove it" in message
    assert problems(lora[:1] + lora[2:], 2) == []  # the reference's size defaults to the actor's
    own_devices = ["actor_rollout_ref.actor.device_ids=[0,1]", "actor_rollout_ref.ref.device_ids=[2]"]
    assert problems(lora + own_devices, 2) == []  # on devices of its own the reference is a frozen copy


def test_validate_config_reports_the_rules():
    with pytest.raises(ConfigError, match=f"{ACTOR_SP}=2 needs at least 2 ranks"):
        validate_config(load_config(GRPO + [f"{ACTOR_SP}=2"]), 1)


def test_the_padded_layout_with_sequence_parallelism_is_named_with_its_fix():
    from hybridrl.config.notices import config_notices

    sp = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "critic.ulysses_sequence_parallel_size=2",
          "algorithm.adv_estimator=gae"]
    quiet = config_notices(load_config(sp + ["actor_rollout_ref.model.use_remove_padding=true",
                                             "critic.model.use_remove_padding=true"]))
    assert not [n for n in quiet if "ulysses" in n]
    loud = [n for n in config_notices(load_config(sp + ["actor_rollout_ref.model.use_remove_padding=false",
                                                         "critic.model.use_remove_padding=false"])) if "ulysses" in n]
    assert [n.split(":")[1].strip() for n in loud] == [
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2 with actor_rollout_ref.model.use_remove_padding=false",
        "critic.ulysses_sequence_parallel_size=2 with critic.model.use_remove_padding=false"]
    assert all("verl requires" in n and "=true" in n for n in loud)
