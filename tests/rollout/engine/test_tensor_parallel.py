"""Tensor-parallel engine replicas on 2 gloo ranks generate what one process does, slice the weights an
update brings, hold only their share of the layers, and refuse shapes that do not divide."""

import pytest
import torch

from hybridrl.distributed.local_launcher import LocalWorkerGroup
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine.parallel import TensorParallel
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model
from tests.rollout.engine.tp_workers import TPEngineRank

SAMPLED = SamplingParams(temperature=0.8, n=2, max_new_tokens=10, ignore_eos=True, seed=5)
GREEDY = SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True)


def one_process(arch, params, seed=1, **overrides):
    out = make_engine(make_model(arch, seed=seed, **overrides)).generate(PROMPTS, params)
    return out.token_ids, out.log_probs


def assert_same_generation(got, want):
    assert got[0] == want[0]  # the same tokens
    for row, (a, b) in enumerate(zip(got[1], want[1])):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0, msg=f"row {row}")


# qwen2: q/k/v and gate/up loaded part by part (with qkv bias); phi3: fused checkpoint tensors; llama with
# one KV head: both ranks keep that head (replicated), each its half of the query heads
MODELS = {"qwen2": ("qwen2", {}), "phi3": ("phi3", {"partial_rotary_factor": 0.5}),
          "llama_one_kv_head": ("llama", {"num_kv_heads": 1})}


@pytest.fixture(scope="module")
def tp_group():
    with LocalWorkerGroup(TPEngineRank, {"models": MODELS}, world_size=2, role="rollout") as group:
        yield group


@pytest.mark.parametrize("name", list(MODELS))
def test_two_rank_replica_generates_what_one_process_does_and_follows_weight_updates(tp_group, name):
    arch, overrides = MODELS[name]
    local = tp_group.call_all("num_local_params", name)
    sampled = tp_group.call_all("generate", name, SAMPLED)
    greedy = tp_group.call_all("generate", name, GREEDY)
    tp_group.call_all("update_weights", name, 2)
    updated = tp_group.call_all("generate", name, GREEDY)
    whole = sum(p.numel() for p in make_engine(make_model(arch, **overrides)).model.parameters())
    assert local[0] == local[1] < whole  # each rank holds its share of the attention and MLP weights
    for rank in range(2):  # both ranks sample the same tokens (no broadcast needed)
        assert_same_generation(sampled[rank], one_process(arch, SAMPLED, **overrides))
        assert_same_generation(greedy[rank], one_process(arch, GREEDY, **overrides))
        assert_same_generation(updated[rank], one_process(arch, GREEDY, seed=2, **overrides))
    assert updated[0][0] != greedy[0][0]  # the update changed the model


def test_ranks_agree_on_the_smallest_kv_cache(tp_group):
    """Each rank sizes the cache from its own device's free memory; the replica's schedulers need one size."""
    assert tp_group.call_all("agree_min", [120, 90]) == [90, 90]


def test_shapes_that_do_not_divide_name_the_key():
    with pytest.raises(ValueError, match=r"num_attention_heads \(4\) does not divide by "
                                         r"actor_rollout_ref.rollout.tensor_model_parallel_size \(3\)"):
        make_engine(make_model("qwen2"), tp=TensorParallel(0, 3))
    with pytest.raises(ValueError, match=r"num_key_value_heads \(3\) and actor_rollout_ref.rollout."
                                         r"tensor_model_parallel_size \(2\) must divide one another"):
        make_engine(make_model("qwen2", hidden_size=48, num_heads=6, num_kv_heads=3), tp=TensorParallel(0, 2))
