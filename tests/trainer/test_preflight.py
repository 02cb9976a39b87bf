"""preflight: the checks `hybridrl train` makes before loading anything, on this machine's devices."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.trainer.preflight import preflight

# The quickstart's GRPO run on CPU (no file is read: preflight needs no model or data).
BASE = [
    "algorithm.adv_estimator=grpo", "data.train_files=/tmp/qs/data/train.parquet",
    "data.val_files=/tmp/qs/data/test.parquet", "data.train_batch_size=8", "data.max_prompt_length=8",
    "data.max_response_length=6", "actor_rollout_ref.model.path=/tmp/qs/sft_model",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32", "trainer.device=cpu", "trainer.test_freq=-1",
    "trainer.save_freq=-1", "trainer.val_before_train=false", "trainer.total_training_steps=1",
]


def preflight_error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        preflight(load_config(BASE + overrides))
    return str(err.value)


def test_device_ids_index_the_runs_ranks_on_cpu():
    """[0, 1] with n_gpus_per_node unset (1 rank on CPU) ran one process while the batch rules divided by 2."""
    message = preflight_error(["actor_rollout_ref.actor.device_ids=[0,1]"])
    assert ("actor_rollout_ref.actor.device_ids=[0, 1] names rank 1 outside 0..0: the run has 1 rank "
            "(trainer.n_gpus_per_node is null: 1 on CPU); set trainer.n_gpus_per_node=2") in message
    plan = preflight(load_config(BASE + ["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.device_ids=[0,1]",
                                         "actor_rollout_ref.rollout.device_ids=[0,1]"]))
    assert (plan.world_size, plan.actor_ranks) == (2, 2)


def test_one_rank_runs_in_this_process_and_more_ranks_or_ray_start_worker_ranks():
    plan = preflight(load_config(BASE))
    assert (plan.launcher, plan.world_size, plan.on_ranks) == ("in_process", 1, False)
    assert plan.groups[0].roles == ("actor", "rollout") and plan.rollout_backend == "hf"
    two = preflight(load_config(BASE + ["trainer.n_gpus_per_node=2"]))
    assert (two.launcher, two.world_size, two.groups[0].device_ids) == ("local", 2, (0, 1))
    assert preflight(load_config(BASE + ["trainer.launcher=ray"])).launcher == "ray"  # one rank, on Ray


def test_ranks_beyond_the_visible_cores_are_fine_on_cpu():
    preflight(load_config(BASE + ["trainer.n_gpus_per_node=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                                  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]))


def test_a_defaulted_rollout_list_follows_the_actor_and_the_idle_rank_is_named():
    message = preflight_error(["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.device_ids=[0]"])
    assert "rank 1 of the run's 2 is used by no role" in message
    assert "actor_rollout_ref.rollout.device_ids=null (defaulted to the actor's devices: [0])" in message


@pytest.mark.parametrize("override, wanted", [
    ("trainer.n_gpus_per_node=0", "trainer.n_gpus_per_node (0) must be >= 1; set it to the devices to use per node, "
                                  "or null (= all visible GPUs, 1 on CPU)"),
    ("trainer.n_gpus_per_node=-1", "trainer.n_gpus_per_node (-1) must be >= 1"),
    ("trainer.nnodes=0", "trainer.nnodes (0) must be >= 1; set trainer.nnodes=1 for one machine"),
])
def test_counts_below_one_name_the_key(override, wanted):
    message = preflight_error([override])
    assert wanted in message and "world_size" not in message


def test_an_empty_actor_list_is_named_once():
    message = preflight_error(["actor_rollout_ref.actor.device_ids=[]"])
    assert message == ("1 placement problem(s):\n  - actor_rollout_ref.actor.device_ids=[] is empty; give at least "
                       "one device index, or null (= the actor's devices; for the actor every device)")


def test_the_local_launcher_on_several_nodes_is_refused_before_loading():
    message = preflight_error(["trainer.launcher=local", "trainer.nnodes=2", "trainer.n_gpus_per_node=1"])
    assert ("trainer.launcher=local runs on one node but trainer.nnodes=2; set trainer.launcher=ray (or auto) for "
            "several nodes, or trainer.nnodes=1") in message


GPU_RANKS_ON_RAY = ["trainer.device=cuda", "trainer.launcher=ray", "actor_rollout_ref.rollout.name=hybrid"]
no_local_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the driver here must see no GPU")


@no_local_gpu
def test_a_driver_without_a_gpu_may_send_gpu_ranks_to_ray():
    """A CPU head node (this machine): the ranks get the cluster's GPUs, so no local GPU is required, but
    the GPUs per node must be given, and nothing may need a GPU in the driver's own process."""
    plan = preflight(load_config(BASE + GPU_RANKS_ON_RAY + ["trainer.n_gpus_per_node=2"]))
    assert (plan.device, plan.world_size) == ("cuda", 2)
    assert "trainer.n_gpus_per_node is null (= the GPUs this node sees) but this driver sees none" in \
        preflight_error(GPU_RANKS_ON_RAY)
    assert "the in-process reward model runs in the driver's process, which sees no GPU" in preflight_error(
        GPU_RANKS_ON_RAY + ["trainer.n_gpus_per_node=2", "reward_model.enable=true", "reward_model.model.path=/rm"])
    assert "or start the ranks on a cluster's GPU nodes with Ray (trainer.launcher=ray)" in preflight_error(
        ["trainer.device=cuda"])  # without Ray it still needs a GPU here
