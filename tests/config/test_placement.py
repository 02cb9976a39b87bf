"""validate_placement: device lists per role and device counts."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config, validate_placement

GAE = ["algorithm.adv_estimator=gae"]


def placement_error(overrides: list[str], num_devices: int) -> str:
    with pytest.raises(ConfigError) as err:
        validate_placement(load_config(overrides), num_devices)
    return str(err.value)


def test_defaults_share_everything():
    validate_placement(load_config(), 1)
    validate_placement(load_config(["trainer.n_gpus_per_node=2"]), 4)


def test_split_actor_and_critic():
    validate_placement(load_config(GAE + ["actor_rollout_ref.actor.device_ids=[0,1]",
                                          "actor_rollout_ref.rollout.device_ids=[0,1]",
                                          "critic.device_ids=[2,3]"]), 4)  # fmt: skip


def test_too_many_devices_requested():
    message = placement_error(["trainer.n_gpus_per_node=8"], 1)
    assert "trainer.nnodes x trainer.n_gpus_per_node (1 x 8 = 8) asks for more devices than the 1 visible" in message
    assert "set trainer.n_gpus_per_node=1" in message


def test_list_problems():
    message = placement_error(GAE + ["actor_rollout_ref.actor.device_ids=[0,0,5]", "critic.device_ids=[0]"], 4)
    assert "actor_rollout_ref.actor.device_ids=[0, 0, 5] has indices [5] outside 0..3 (4 devices)" in message
    assert "actor_rollout_ref.actor.device_ids=[0, 0, 5] repeats [0]" in message
    assert "share devices [0]; the actor and critic need separate devices" in message


def test_rollout_critic_overlap():
    message = placement_error(GAE + ["actor_rollout_ref.actor.device_ids=[0]", "actor_rollout_ref.rollout.device_ids=[1]",
                                     "critic.device_ids=[1]"], 2)  # fmt: skip
    assert "the rollout and critic need separate devices" in message


def test_role_list_without_actor_list():
    message = placement_error(GAE + ["critic.device_ids=[1]"], 2)
    assert "critic.device_ids=[1] given while actor_rollout_ref.actor.device_ids is null: give every role a list or none" in message


def test_list_for_unused_role():
    message = placement_error(["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.device_ids=[0]", "critic.device_ids=[1]"], 2)
    assert "critic.device_ids=[1] is set but the critic role is not used" in message


TP = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def test_tensor_parallel_rollout_needs_whole_replicas_and_the_engine():
    validate_placement(load_config(["trainer.n_gpus_per_node=4", f"{TP}=2"]), 4)  # two replicas of 2
    validate_placement(load_config(["trainer.n_gpus_per_node=4", f"{TP}=2", "actor_rollout_ref.actor.device_ids=[0,1]",
                                    "actor_rollout_ref.rollout.device_ids=[2,3]"]), 4)  # one replica of its own
    message = placement_error([f"{TP}=2"], 1)  # one process
    assert f"{TP}=2 does not divide the rollout's 1 device(s)" in message and "give the rollout a multiple of 2" in message
    message = placement_error(["trainer.n_gpus_per_node=4", f"{TP}=2", "actor_rollout_ref.actor.device_ids=[0,1]",
                               "actor_rollout_ref.rollout.device_ids=[1,2,3]"], 4)
    assert "does not divide the rollout's 3 device(s)" in message


def test_fsdp_size_divides_a_roles_ranks():
    for size in (4, 2, 1):  # all of them, or hybrid sharding over groups of `size`
        validate_placement(load_config(["trainer.n_gpus_per_node=4", f"actor_rollout_ref.actor.fsdp_config.fsdp_size={size}"]), 4)
    validate_placement(load_config(GAE + ["actor_rollout_ref.actor.device_ids=[0,1]", "actor_rollout_ref.rollout.device_ids=[0,1]",
                                          "critic.device_ids=[2,3]", "critic.model.fsdp_config.fsdp_size=2"]), 4)
    message = placement_error(["trainer.n_gpus_per_node=4", "actor_rollout_ref.ref.fsdp_config.fsdp_size=3"], 4)
    assert ("actor_rollout_ref.ref.fsdp_config.fsdp_size=3 must be -1 (shard over all of the role's 4 rank(s)) or "
            "divide 4: 1, 2, 4") in message
