"""The run plan: role groups from the device lists, the roles a run needs, and what the plan answers."""

from __future__ import annotations

import pickle

import pytest

from hybridrl.config import load_config
from hybridrl.config.run_plan import GroupPlan, RoleNeeds, build_run_plan, plan_groups

ROLES = ("actor", "rollout", "reference", "critic")


def test_groups_follow_the_device_lists_and_null_lists_join_the_actors_group():
    """The issue's layout with a KL loss: the reference's null list keeps it with the actor, so four groups
    of ranks are not started for three lists. No lists at all: one group hosting every role."""
    cfg = load_config(["algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true",
                       "actor_rollout_ref.actor.device_ids=[0,1,2,3]", "critic.device_ids=[4,5]",
                       "actor_rollout_ref.rollout.device_ids=[6,7]"])
    assert plan_groups(cfg, 8, ROLES) == [GroupPlan("actor_ref", (0, 1, 2, 3), ("actor", "reference")),
                                          GroupPlan("rollout", (6, 7), ("rollout",)),
                                          GroupPlan("critic", (4, 5), ("critic",))]
    assert plan_groups(load_config(["algorithm.adv_estimator=gae"]), 2, ROLES) == [
        GroupPlan("actor_rollout_ref", (0, 1), ROLES)]


def test_a_critic_sharing_the_rollouts_ranks_is_in_its_group_name():
    cfg = load_config(["algorithm.adv_estimator=gae", "actor_rollout_ref.actor.device_ids=[0]",
                       "actor_rollout_ref.rollout.device_ids=[1]", "critic.device_ids=[1]"])
    assert [plan.name for plan in plan_groups(cfg, 2, ("actor", "rollout", "critic"))] == ["actor", "rollout_critic"]


def test_the_plan_holds_the_roles_the_run_needs_and_their_groups():
    plan = build_run_plan(load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true"]),
                          device="cpu", world_size=1, launcher="in_process")
    assert plan.needs == RoleNeeds(critic=False, reference=True, greedy_baseline=False)
    assert plan.groups == (GroupPlan("actor_rollout_ref", (0,), ("actor", "rollout", "reference")),)
    assert not plan.on_ranks and plan.rollout_backend == "hf" and not plan.hosts("critic")
    assert plan.group_of("reference").name == "actor_rollout_ref"
    with pytest.raises(KeyError, match="no group of this run hosts the critic role"):
        plan.group_of("critic")
    assert pickle.loads(pickle.dumps(plan)) == plan  # it travels to the ranks


def test_a_remote_critic_starts_no_ranks_and_the_launcher_is_checked():
    cfg = load_config(["algorithm.adv_estimator=gae", "critic.type=vllm_api", "critic.model.path=http://127.0.0.1:1"])
    plan = build_run_plan(cfg, device="cuda", world_size=2, launcher="local")
    assert plan.remote_critic and plan.needs.critic and not plan.hosts("critic")
    assert plan.on_ranks and plan.rollout_backend == "hybrid" and plan.actor_ranks == 2
    with pytest.raises(ValueError, match="launcher 'slurm' is not one of"):
        build_run_plan(cfg, device="cpu", world_size=1, launcher="slurm")
