"""fsdp_config.offload_policy (FSDP2's CPUOffloadPolicy): on ranks the roles shard with it and train like plain
FSDP2 roles; in one process (no process group) it acts as the between-phase offload, with a warning."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.workers.helpers import build_actor, build_critic, ragged_batch, worker_config
from tests.workers.test_offload import assert_offload_matches_plain, assert_same_state, fake_transfer, \
    train_offload_ranks

ROLES = ("actor_rollout_ref.actor", "critic.model")
# as verl's run_qwen3_5_27b_fsdp.sh sets them: the policy with the between-phase offloads it supersedes
POLICY_FLAGS = [f"{role}.fsdp_config.{key}=true" for role in ROLES
                for key in ("offload_policy", "param_offload", "optimizer_offload")]
WHOLE_PER_RANK = [f"{role}.fsdp_config.fsdp_size=1" for role in ROLES]
CLIPPED = ["actor_rollout_ref.actor.grad_clip=0.05", "critic.grad_clip=0.05"]  # below the norms: clipping runs


def test_one_process_keeps_the_model_whole_and_moves_it_out_between_phases(monkeypatch, tiny_model_dir, caplog):
    """No process group for FSDP2: parameters and optimizer state leave the device between phases (as
    param_offload + optimizer_offload), a warning says so, and training equals the plain actor's."""
    batch = ragged_batch(num_rows=8, seed=5)
    plain = build_actor(tiny_model_dir, CLIPPED)
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        mapped = build_actor(tiny_model_dir, [*CLIPPED, "actor_rollout_ref.actor.fsdp_config.offload_policy=true"])
    assert (mapped.parallel.name, mapped.parallel.offloads_to_cpu) == ("single device", False)
    assert (mapped.offloader.param_offload, mapped.offloader.optimizer_offload) == (True, True)
    assert "actor_rollout_ref.actor.fsdp_config.offload_policy=true: FSDP2's CPUOffloadPolicy needs a process " \
           "group" in caplog.text and "as param_offload=true, optimizer_offload=true" in caplog.text
    moves = fake_transfer(monkeypatch)
    metrics = [actor.update_actor(batch) for actor in (plain, mapped)]
    assert "cpu" in moves and metrics[0]["actor/grad_norm"] > 0.05
    assert metrics[0] == metrics[1]
    assert_same_state(mapped.state_dict(), plain.state_dict())


def test_one_process_reference_keeps_its_parameters_out_between_forwards(tiny_model_dir, caplog):
    from hybridrl.workers.reference import build_reference

    actor = build_actor(tiny_model_dir)
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        cfg = worker_config(tiny_model_dir, ["actor_rollout_ref.ref.fsdp_config.offload_policy=true"])
        reference = build_reference(cfg, None, 2, torch.device("cpu"))
    assert (reference.offloader.param_offload, reference.offloader.optimizer_offload) == (True, False)
    assert "parameters stay on the CPU between forwards (as param_offload=true)" in caplog.text
    batch = ragged_batch(num_rows=4, seed=1)
    torch.testing.assert_close(reference.compute_ref_log_prob(batch)["ref_log_prob"],
                               actor.compute_log_prob(batch)["old_log_probs"], rtol=0, atol=0)


@pytest.mark.slow  # ~30-60 s on 2 busy cores: two ranks import transformers and build three actor/critic pairs
def test_two_ranks_train_the_same_with_fsdp2s_cpu_offload_policy(tiny_model_dir):
    """2 gloo ranks: the actor and critic shard with CPUOffloadPolicy (fsdp_size=-1, and fsdp_size=1 as shard
    groups of one) and match plain FSDP2 roles: losses, clipped gradient norms, log-probs and values after two
    updates, the weights a rollout sync gathers, the full checkpoint state and its reload. param_offload and
    optimizer_offload beside the policy move nothing."""
    ranks = train_offload_ranks(tiny_model_dir, "cpu", 2, common=CLIPPED,
                                variants={"offload": POLICY_FLAGS, "whole_per_rank": POLICY_FLAGS + WHOLE_PER_RANK})
    for rank in ranks:
        assert rank["plain"]["layout"]["offloads_to_cpu"] is False
        for variant in ("offload", "whole_per_rank"):
            assert rank[variant]["layout"] | {"pinned": None} == {  # fused: the optimizer steps on the CPU
                "strategy": "FSDP2", "offloads_to_cpu": True, "param_devices": ["cpu"], "pinned": None, "fused": True}
        assert rank["plain"]["metrics"]["actor/grad_norm"] > 0.05 and rank["moves"] == 0
    assert_offload_matches_plain(ranks, tolerance=1e-6, variants=("offload", "whole_per_rank"))


def test_a_one_rank_group_shards_over_itself_with_the_policy(tiny_model_dir):
    """A rank of a one-rank group has a process group: CPUOffloadPolicy applies (FSDP2 over one rank) and the
    roles train like the plain single-device roles."""
    (rank,) = train_offload_ranks(tiny_model_dir, "cpu", 1, common=CLIPPED, variants={"offload": POLICY_FLAGS})
    assert (rank["plain"]["layout"]["strategy"], rank["offload"]["layout"]["strategy"]) == ("single device", "FSDP2")
    assert rank["offload"]["layout"]["offloads_to_cpu"] and rank["offload"]["layout"]["fused"] and rank["moves"] == 0
    assert_offload_matches_plain([rank], tolerance=1e-6)


# --------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_ranks_hold_roles_in_pinned_host_memory_and_train_the_same(tiny_model_dir):
    """NCCL ranks (two where two GPUs are visible, else one): the policy's roles keep their shards in pinned host
    memory and leave almost nothing on the device once built (the model was loaded on the CPU); training,
    clipping (its all-reduce through the device), the per-unit weight gather, the full state and its reload
    match plain FSDP2 roles, also with activation offload on top (`activations`)."""
    world_size = min(torch.cuda.device_count(), 2)
    # fp32 compute: the fused CPU and CUDA AdamW kernels may round the last bit apart, which bf16 casts would amplify
    fp32 = [f"{role}.fsdp_config.dtype=float32" for role in ROLES]
    activations = POLICY_FLAGS + ["actor_rollout_ref.model.enable_activation_offload=true",
                                  "critic.model.enable_activation_offload=true"]
    ranks = train_offload_ranks(tiny_model_dir, "cuda", world_size, common=CLIPPED + fp32,
                                variants={"offload": POLICY_FLAGS, "activations": activations})
    for rank in ranks:
        assert rank["offload"]["layout"] == {"strategy": "FSDP2", "offloads_to_cpu": True, "param_devices": ["cpu"],
                                             "pinned": True, "fused": True}
        plain, offloaded = rank["device_bytes"]["plain"], rank["device_bytes"]["offload"]
        assert plain > 0 and offloaded < plain / 10, rank["device_bytes"]
    assert_offload_matches_plain(ranks, tolerance=1e-5, variants=("offload", "activations"))


@pytest.mark.gpu
def test_gpu_one_process_critic_with_the_policy_trains_the_same(tiny_model_dir):
    batch = ragged_batch(num_rows=8, seed=5)
    plain = build_critic(tiny_model_dir, device="cuda")
    mapped = build_critic(tiny_model_dir, ["critic.model.fsdp_config.offload_policy=true"], device="cuda")
    assert next(mapped.model.parameters()).device.type == "cpu"  # out between phases
    for critic in (plain, mapped):
        critic.update_critic(batch)
    torch.testing.assert_close(mapped.compute_values(batch)["values"], plain.compute_values(batch)["values"])
