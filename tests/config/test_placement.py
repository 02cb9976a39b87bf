"""validate_placement: device lists per role (null = the actor's list; the actor's null = every device of the
run) and device counts."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config, validate_placement

GAE = ["algorithm.adv_estimator=gae"]
GRPO = ["algorithm.adv_estimator=grpo"]
ACTOR, ROLLOUT, REF = (f"actor_rollout_ref.{role}.device_ids" for role in ("actor", "rollout", "ref"))


def placement_error(overrides: list[str], num_devices: int, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        validate_placement(load_config(overrides), num_devices, **kwargs)
    return str(err.value)


@pytest.mark.parametrize("layout, num_devices", [
    ([], 1),  # the hybrid engine: every role on every device
    (["trainer.n_gpus_per_node=2"], 2),
    (GAE + [f"{ACTOR}=[0,1]", f"{ROLLOUT}=[0,1]", "critic.device_ids=[2,3]"], 4),  # the critic on its own devices
    (GAE + ["actor_rollout_ref.actor.use_kl_loss=true", f"{ACTOR}=[0]", f"{REF}=[0]", f"{ROLLOUT}=[1]",
            "critic.device_ids=[2]"], 3),  # actor+ref, rollout, critic: a group each (test_multi_process)
    (GRPO + [f"{ACTOR}=[0]", f"{ROLLOUT}=[1]"], 2),  # the rollout on a device of its own (elastic rollout)
    (GRPO + ["actor_rollout_ref.actor.use_kl_loss=true", f"{ACTOR}=[0]", f"{ROLLOUT}=[0]", f"{REF}=[1]"], 2),
    (GAE + [f"{ACTOR}=[0]", f"{ROLLOUT}=[1]", "critic.device_ids=[1]"], 2),  # rollout and critic take turns
    (GAE + [f"{ACTOR}=[0,1]", f"{ROLLOUT}=[0,1]", "critic.device_ids=[0,1]"], 2),  # explicit, like the default
    # the example, with a reference: its null list keeps it with the actor
    (GAE + ["actor_rollout_ref.actor.use_kl_loss=true", f"{ACTOR}=[0,1,2,3]", "critic.device_ids=[4,5]",
            f"{ROLLOUT}=[6,7]"], 8),
    # an in-process reward model on a GPU of its own (it lives in the controller: it may also share)
    (GRPO + [f"{ACTOR}=[0]", "reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.device_ids=[1]"],
     2),
])
def test_supported_layouts(layout, num_devices):
    validate_placement(load_config(layout), num_devices)


def test_too_many_devices_requested():
    message = placement_error(["trainer.n_gpus_per_node=8"], 8, num_visible=1)
    assert "trainer.nnodes x trainer.n_gpus_per_node (1 x 8 = 8) asks for more devices than the 1 visible" in message
    assert "set trainer.n_gpus_per_node=1" in message


def test_list_problems():
    message = placement_error(GAE + [f"{ACTOR}=[0,0,5]", "critic.device_ids=[0]"], 4)
    assert (f"{ACTOR}=[0, 0, 5] names device 5 outside 0..3: the run has 4 devices (trainer.n_gpus_per_node is "
            "null: the 4 visible GPU(s)); set trainer.n_gpus_per_node=6 (or keep the ids in 0..3)") in message
    assert f"{ACTOR}=[0, 0, 5] repeats [0]; one rank per device, e.g. {ACTOR}=[0, 5]" in message


def test_ids_are_checked_against_the_runs_devices_not_the_visible_ones():
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=2", f"{ACTOR}=[0,3]", f"{ROLLOUT}=[0,3]"], 2,
                              num_visible=4)
    assert (f"{ACTOR}=[0, 3] names device 3 outside 0..1: the run has 2 devices (trainer.n_gpus_per_node=2); "
            "set trainer.n_gpus_per_node=4 (or keep the ids in 0..1)") in message
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=2", f"{ACTOR}=[0,3]", f"{ROLLOUT}=[0,3]"], 2,
                              num_visible=2)
    assert "keep the ids in 0..1 (only 2 GPU(s) are visible)" in message


def test_null_lists_follow_the_actor_so_a_device_left_over_is_named():
    """gae, 2 devices, only the actor's list: the critic and rollout share the actor's device 0 through their
    null lists, and device 1 would idle."""
    message = placement_error(GAE + ["trainer.n_gpus_per_node=2", f"{ACTOR}=[0]"], 2)
    assert "1 placement problem(s)" in message
    assert "device 1 of the run's 2 is used by no role" in message
    assert "critic.device_ids=null (defaulted to the actor's devices: [0])" in message
    assert "name it in a role's device_ids, or set trainer.n_gpus_per_node=1" in message


def test_a_null_actor_list_is_every_device_and_the_others_follow_it():
    """The actor's null list means every device, so a rollout on some of them overlaps it partially."""
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=2", f"{ROLLOUT}=[1]"], 2)
    assert (f"{ACTOR}=null (defaulted to every device: [0, 1]) and {ROLLOUT}=[1] share device(s) [1]") in message


def test_partial_overlap_is_refused():
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=3", f"{ACTOR}=[0,1]", f"{ROLLOUT}=[1,2]"], 3)
    assert f"{ACTOR}=[0, 1] and {ROLLOUT}=[1, 2] share device(s) [1]" in message
    assert f"set {ACTOR}=[0] or {ROLLOUT}=[2]" in message  # not {ROLLOUT}=[0, 1]: device 2 would idle


def test_a_reference_on_some_of_the_actors_devices_is_refused():
    """ref [1] inside actor [0, 1] would be a second process on device 1; share all of them or none."""
    message = placement_error(GAE + ["actor_rollout_ref.actor.use_kl_loss=true", f"{ACTOR}=[0,1]", f"{ROLLOUT}=[0,1]",
                                     f"{REF}=[1]", "critic.device_ids=[2,3]"], 4)
    assert f"{ACTOR}=[0, 1] and {REF}=[1] share device(s) [1]" in message
    assert f"set {REF}=[0, 1]" in message  # [2, 3] (with the critic) would leave the rollout overlapping it


def test_exclusive_pairs_overlap():
    message = placement_error(GAE + [f"{ACTOR}=[0]", f"{ROLLOUT}=[1,2]", "critic.device_ids=[2]"], 3)
    assert f"{ROLLOUT}=[1, 2] and critic.device_ids=[2] share device(s) [2]; the rollout and critic" in message
    assert f"set {ROLLOUT}=[1] or critic.device_ids=[1, 2]" in message
    message = placement_error(GAE + [f"{ACTOR}=[0]", f"{ROLLOUT}=[0]", "critic.device_ids=[0,1]"], 2)
    assert "the actor and critic need separate devices" in message


def test_a_device_used_by_no_role_is_named():
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=2", f"{ACTOR}=[0]", f"{ROLLOUT}=[0]"], 2)
    assert (f"device 1 of the run's 2 is used by no role ({ACTOR}=[0], {ROLLOUT}=[0]); name it in a role's "
            "device_ids, or set trainer.n_gpus_per_node=1") in message
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=3", f"{ACTOR}=[2]", f"{ROLLOUT}=[2]"], 3,
                              device_type="cpu")
    assert "ranks [0, 1] of the run's 3 are used by no role" in message
    assert "set trainer.n_gpus_per_node=1 and renumber the lists to 0..0" in message


def test_role_list_without_actor_list():
    message = placement_error(GAE + ["trainer.n_gpus_per_node=2", "critic.device_ids=[1]"], 2)
    assert (f"{ACTOR}=null (defaulted to every device: [0, 1]) and critic.device_ids=[1] share device(s) [1]" in
            message)
    assert f"set {ACTOR}=[0] or critic.device_ids=[0, 1]" in message  # not {ACTOR}=[1]: device 0 would idle


def test_list_for_unused_role():
    message = placement_error(GRPO + [f"{ACTOR}=[0]", "critic.device_ids=[1]"], 2)
    assert "critic.device_ids=[1] is set but the critic role is not used" in message


def test_a_remote_critic_takes_no_device():
    remote = GAE + ["critic.type=vllm_api", "critic.model.path=http://localhost:8000"]
    validate_placement(load_config(remote + [f"{ACTOR}=[0]", f"{ROLLOUT}=[1]"]), 2)
    message = placement_error(remote + [f"{ACTOR}=[0]", f"{ROLLOUT}=[1]", "critic.device_ids=[1]"], 2)
    assert "critic.device_ids=[1] is set but the critic role is a remote endpoint; remove it" in message


def test_empty_list():
    message = placement_error([f"{ACTOR}=[]"], 1)
    assert f"{ACTOR}=[] is empty; give at least one device index, or null (= the actor's devices; for the actor every device)" in message


TP = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def test_tensor_parallel_rollout_needs_whole_replicas_and_the_engine():
    validate_placement(load_config(["trainer.n_gpus_per_node=4", f"{TP}=2"]), 4)  # two replicas of 2
    validate_placement(load_config(GRPO + ["trainer.n_gpus_per_node=4", f"{TP}=2", f"{ACTOR}=[0,1]",
                                           f"{ROLLOUT}=[2,3]"]), 4)  # one replica of its own
    message = placement_error([f"{TP}=2"], 1)  # one process
    assert f"{TP}=2 does not divide the rollout's 1 device(s)" in message and "give the rollout a multiple of 2" in message
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=4", f"{TP}=2", f"{ACTOR}=[0]", f"{ROLLOUT}=[1,2,3]"], 4)
    assert "does not divide the rollout's 3 device(s)" in message
    message = placement_error([f"{TP}=2", "actor_rollout_ref.rollout.name=auto"], 2, device_type="cpu")
    assert f"{TP}=2 needs the hybrid engine (rollout.name=auto is the hf backend on cpu)" in message


def test_fsdp_size_divides_a_roles_ranks():
    for size in (8, 4, 2, 1):  # all of them (at least their number: verl's create_device_mesh), or groups of `size`
        validate_placement(load_config(["trainer.n_gpus_per_node=4", f"actor_rollout_ref.actor.fsdp_config.fsdp_size={size}"]), 4)
    validate_placement(load_config(GAE + [f"{ACTOR}=[0,1]", f"{ROLLOUT}=[0,1]",
                                          "critic.device_ids=[2,3]", "critic.model.fsdp_config.fsdp_size=2"]), 4)
    message = placement_error(["trainer.n_gpus_per_node=4", "actor_rollout_ref.ref.fsdp_config.fsdp_size=3"], 4)
    assert ("actor_rollout_ref.ref.fsdp_config.fsdp_size=3 must be -1 or >= 4 (shard over all of the role's 4 "
            "rank(s)) or divide 4: 1, 2, 4") in message


def test_a_reward_model_list_must_be_for_an_in_process_model():
    message = placement_error(GRPO + ["reward_model.enable=true", "reward_model.model.path=http://rm:8000",
                                      "reward_model.device_ids=[0]"], 1)
    assert "reward_model.device_ids=[0] is set but the reward_model role is a remote endpoint; remove it" in message


@pytest.mark.parametrize("layout, num_devices", [
    (GRPO + ["trainer.n_gpus_per_node=2", f"{ROLLOUT}=[1]"], 2),
    (GRPO + ["trainer.n_gpus_per_node=3", f"{ACTOR}=[0,1]", f"{ROLLOUT}=[1,2]"], 3),
    (GAE + ["trainer.n_gpus_per_node=3", f"{ACTOR}=[0,1]", f"{ROLLOUT}=[2]", "critic.device_ids=[1,2]"], 3),
    (GAE + ["actor_rollout_ref.actor.use_kl_loss=true", "trainer.n_gpus_per_node=2", f"{REF}=[1]"], 2),
    (GAE + [f"{ACTOR}=[0]", f"{ROLLOUT}=[1,2]", "critic.device_ids=[2]"], 3),
])
def test_every_suggested_fix_passes_when_applied(layout, num_devices):
    """Each overlap error's `set KEY=[...]` alternatives, applied alone, give a layout the rules accept (the
    first audit found fixes that traded one error for another)."""
    import re

    message = placement_error(layout, num_devices)
    suggestions = set(re.findall(r"(?:set | or )([\w.]+\.device_ids=\[[\d, ]*\])", message))
    assert suggestions, message
    for suggestion in suggestions:
        validate_placement(load_config(layout + [suggestion.replace(" ", "")]), num_devices)


def test_device_count_fixes_on_several_nodes_give_counts_that_add_up():
    message = placement_error(GRPO + ["trainer.nnodes=2", f"{ACTOR}=[0,1,2]", f"{ROLLOUT}=[0,1,2]"], 2,
                              device_type="cpu")
    assert "set trainer.n_gpus_per_node=2 and name device 3 in a list too (2 nodes x 2)" in message
    message = placement_error(GRPO + ["trainer.nnodes=2", "trainer.n_gpus_per_node=2", f"{ACTOR}=[0,1]",
                                      f"{ROLLOUT}=[0,1]"], 4)
    assert "set trainer.n_gpus_per_node=1 (x trainer.nnodes=2)" in message
    message = placement_error(GRPO + ["trainer.nnodes=2", f"{ACTOR}=[0]", f"{ROLLOUT}=[0]"], 2, device_type="cpu")
    assert "set trainer.nnodes=1 trainer.n_gpus_per_node=1 (1 device(s) do not split evenly over trainer.nnodes=2)" \
        in message


def test_a_reward_model_list_places_nothing_on_cpu():
    message = placement_error(GRPO + ["trainer.n_gpus_per_node=2", "reward_model.enable=true",
                                      "reward_model.model.path=/rm", f"{ACTOR}=[0]", "reward_model.device_ids=[1]"],
                              2, device_type="cpu")
    assert "reward_model.device_ids=[1] places the in-process reward model on GPUs; this CPU run scores" in message
