"""The actor and critic with Ulysses sequence parallelism (`*.ulysses_sequence_parallel_size`) on gloo ranks:
log-probs, values, metrics and gradients equal one process on the whole batch."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed.local_launcher import LocalWorkerGroup
from hybridrl.workers.role_groups import GroupActor, GroupCritic
from tests.workers.helpers import build_actor, build_critic, ragged_batch
from tests.workers.rank_actor import ActorCriticRank

SP2 = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "critic.ulysses_sequence_parallel_size=2",
       "actor_rollout_ref.actor.use_kl_loss=false"]


def _relative(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest relative difference of matching gradients (an all-zero one must come back all zero: LoRA's A
    gets none while B is zero)."""
    assert len(a) == len(b)
    return max(((x - y).norm() / y.norm().clamp(min=1e-12)).item() for x, y in zip(a, b))


def _one_process(model_dir: str, extra: list[str], batch) -> dict:
    extra = [key for key in extra if "ulysses" not in key]  # one process: the whole sequence on one rank
    torch.manual_seed(0)  # LoRA's adapter initialisation, as on the ranks (ActorCriticRank)
    actor, critic = build_actor(model_dir, extra), build_critic(model_dir, extra)
    out = {"log_probs": actor.compute_log_prob(batch)["old_log_probs"], "values": critic.compute_values(batch)["values"]}
    out["actor_metrics"], out["critic_metrics"] = actor.update_actor(batch), critic.update_critic(batch)
    out["grads"] = {role: [p.grad for p in worker.model.parameters() if p.grad is not None]
                    for role, worker in (("actor", actor), ("critic", critic))}
    return out


def _check(got: dict, want: dict, batch) -> None:
    mask = batch["response_mask"].bool()
    for key in ("log_probs", "values"):
        torch.testing.assert_close(got[key][mask], want[key][mask], rtol=1e-5, atol=1e-5, msg=key)
    for key in ("actor/pg_loss", "actor/ppo_kl", "actor/pg_clipfrac", "actor/grad_norm"):
        assert got["actor_metrics"][key] == pytest.approx(want["actor_metrics"][key], rel=1e-4, abs=1e-6), key
    assert got["critic_metrics"]["critic/vf_loss"] == pytest.approx(want["critic_metrics"]["critic/vf_loss"], rel=1e-4)
    for role in ("actor", "critic"):
        assert _relative(got["grads"][role], want["grads"][role]) < 1e-5, role


def _on_ranks(model_dir: str, extra: list[str], batch, ranks: int) -> dict:
    with LocalWorkerGroup(ActorCriticRank, {"model_dir": model_dir, "extra": extra}, world_size=ranks,
                          role="actor") as group:
        actor, critic = GroupActor(group, 2), GroupCritic(group, 2)
        out = {"log_probs": actor.compute_log_prob(batch)["old_log_probs"],
               "values": critic.compute_values(batch)["values"]}
        out["actor_metrics"], out["critic_metrics"] = actor.update_actor(batch), critic.update_critic(batch)
        out["grads"] = group.call_all("full_grads")[0]
    return out


@pytest.mark.parametrize("layout", ["aligned", "masked"])
def test_two_ranks_splitting_each_sequence_match_one_process(tiny_model_dir, layout):
    """One group of 2 (data-parallel size 1); remove_padding aligns rows (no mask) or keeps the padded layout."""
    extra = SP2 + [f"actor_rollout_ref.model.use_remove_padding={layout == 'aligned'}",
                   f"critic.model.use_remove_padding={layout == 'aligned'}"]
    batch = ragged_batch(num_rows=8, seed=21)
    _check(_on_ranks(tiny_model_dir, extra, batch, ranks=2), _one_process(tiny_model_dir, extra, batch), batch)


@pytest.mark.slow  # four ranks on two cores
def test_four_ranks_two_groups_with_dynamic_batches_match_one_process(tiny_model_dir):
    """Data-parallel size 2 × sequence-parallel 2, token-budget micro-batches and a seq-mean loss."""
    extra = SP2 + ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40",
                   "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
                   "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=40",
                   "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]
    batch = ragged_batch(num_rows=8, seed=22)
    _check(_on_ranks(tiny_model_dir, extra, batch, ranks=4), _one_process(tiny_model_dir, extra, batch), batch)


@pytest.mark.slow  # two ranks; LoRA and recomputation in backward (the all-to-alls run again there)
def test_lora_and_gradient_checkpointing_with_two_ranks_match_one_process(tiny_model_dir):
    extra = SP2 + ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
                   "actor_rollout_ref.model.enable_gradient_checkpointing=true",
                   "critic.model.enable_gradient_checkpointing=true"]
    batch = ragged_batch(num_rows=8, seed=23)
    _check(_on_ranks(tiny_model_dir, extra, batch, ranks=2), _one_process(tiny_model_dir, extra, batch), batch)
