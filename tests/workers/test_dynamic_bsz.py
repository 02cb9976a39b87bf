"""use_dynamic_bsz in the workers: token-budget micro-batches give the row-count micro-batches' results."""

from __future__ import annotations

import pytest
import torch

from hybridrl.workers.reference import ReferenceWorker
from tests.workers.helpers import build_actor, build_critic, ragged_batch, worker_config

DYNAMIC = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=45",
           "critic.ppo_max_token_len_per_gpu=45"]  # rows hold 2..18 tokens: a few micro-batches, not 4 of 2 rows


def test_log_probs_values_and_ref_log_probs_equal_fixed_micro_batches(tiny_model_dir):
    batch = ragged_batch(num_rows=8, seed=11)
    mask = batch["response_mask"].bool()
    outputs = {}
    for name, extra in (("fixed", []), ("dynamic", DYNAMIC)):
        actor = build_actor(tiny_model_dir, extra)
        critic = build_critic(tiny_model_dir, extra)
        cfg = worker_config(tiny_model_dir, extra)
        reference = ReferenceWorker(cfg, 2, torch.device("cpu"))
        outputs[name] = (actor.compute_log_prob(batch), critic.compute_values(batch)["values"],
                         reference.compute_ref_log_prob(batch)["ref_log_prob"])
        plans = (actor.log_prob_plan, critic.values_plan, reference.plan)
        if name == "dynamic":  # the budgets really reorder the rows into other micro-batches
            assert [p.max_tokens for p in plans] == [45, 45, 45]
            parts = actor.log_prob_plan.split(batch).parts
            assert len(parts) != 4 and any(len(p) != 2 for p in parts)
    (fixed_lp, fixed_v, fixed_ref), (dyn_lp, dyn_v, dyn_ref) = outputs["fixed"], outputs["dynamic"]
    for key in ("old_log_probs", "entropys"):
        torch.testing.assert_close(dyn_lp[key][mask], fixed_lp[key][mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dyn_v, fixed_v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dyn_ref[mask], fixed_ref[mask], rtol=1e-5, atol=1e-5)


def update_grads(model_dir: str, extra: list[str]) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """Gradients of one mini-batch (8 rows) for the actor and the critic, and the actor's micro-batch count."""
    batch = ragged_batch(num_rows=8, seed=12)
    actor, critic = build_actor(model_dir, extra), build_critic(model_dir, extra)
    actor.update_actor(batch)
    critic.update_critic(batch)
    grads = [[p.grad.clone() for p in worker.model.parameters() if p.grad is not None] for worker in (actor, critic)]
    return grads[0], grads[1], len(actor.update_plan.split(batch).parts)


def max_relative_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(((x - y).norm() / y.norm()).item() for x, y in zip(a, b))


@pytest.mark.parametrize("scope, mode, equal", [
    ("mini_batch", "token-mean", True), ("mini_batch", "seq-mean-token-sum-norm", True),
    ("micro_batch", "seq-mean-token-mean", True), ("micro_batch", "token-mean", False)])
def test_update_gradients_match_fixed_micro_batches_unless_micro_batch_means_differ(tiny_model_dir, scope, mode,
                                                                                    equal):
    """loss_agg_scope=mini_batch (default): each micro-batch's loss is weighted by its share of the mini-batch's
    tokens or sequences, so every mode gives the mini-batch's gradient whatever the split. micro_batch (verl's
    legacy workers): a local mean scaled by micro rows / mini rows, which sums to the mini-batch mean for
    seq-mean-token-mean only; token-mean then weighs a micro-batch's tokens by its own token count, so another
    split gives (slightly) different gradients."""
    keys = [f"actor_rollout_ref.actor.loss_agg_mode={mode}", f"actor_rollout_ref.actor.loss_agg_scope={scope}"]
    fixed_actor, fixed_critic, fixed_parts = update_grads(tiny_model_dir, keys)
    dyn_actor, dyn_critic, dyn_parts = update_grads(tiny_model_dir, keys + DYNAMIC)
    assert (fixed_parts, dyn_parts) == (4, 2)
    actor_diff = max_relative_difference(dyn_actor, fixed_actor)
    critic_diff = max_relative_difference(dyn_critic, fixed_critic)
    if equal:
        assert actor_diff < 1e-5 and critic_diff < 1e-5
    else:
        assert actor_diff > 1e-3 and critic_diff > 1e-3


@pytest.mark.slow  # ~25 s on 2 busy cores: two gloo ranks import transformers and build the actor
def test_two_ranks_agree_on_the_number_of_micro_batches_and_match_one_process(tiny_model_dir):
    """Rank 0 gets long rows, rank 1 short ones: locally they need different micro-batch counts, but every
    FSDP2 forward is a collective, so both run the larger count; results equal one process on all rows."""
    from hybridrl.distributed.local_launcher import LocalWorkerGroup
    from tests.workers.rank_actor import ActorRank

    extra = DYNAMIC + ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]
    batch = ragged_batch(num_rows=8, seed=13)
    order = batch["attention_mask"].sum(-1).argsort(descending=True)
    batch = batch.index(order)  # rows 0-3 (rank 0) the longest
    one = build_actor(tiny_model_dir, extra)
    expected = one.compute_log_prob(batch)["old_log_probs"]
    one.update_actor(batch)
    with LocalWorkerGroup(ActorRank, {"model_dir": tiny_model_dir, "extra": extra}, world_size=2,
                          role="actor") as group:
        out = group.call_sharded("compute_log_prob", batch)
        group.call_sharded_metrics("update_actor", batch)
        grads = group.call_all("full_grads")[0]
    local = out["local_min_parts"].tolist()
    assert local[0] != local[-1] and set(out["num_parts"].tolist()) == {max(local)}
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(out["old_log_probs"][mask], expected[mask], rtol=1e-5, atol=1e-5)
    want = [p.grad for p in one.model.parameters() if p.grad is not None]
    assert max_relative_difference(grads, want) < 1e-5
