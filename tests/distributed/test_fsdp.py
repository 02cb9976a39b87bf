"""FSDP2 on CPU with gloo: 2 ranks on half a batch each match one process on the whole batch."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed.local_launcher import LocalWorkerGroup
from hybridrl.models.tiny import build_tiny_model
from hybridrl.utils.batch import Batch
from tests.distributed.fsdp_workers import FSDPWorker, MixedPrecisionLogits, RankProbe, sgd_step


@pytest.mark.slow  # ~20-40 s on 2 busy cores: two ranks import transformers and build the model
def test_two_rank_fsdp2_step_matches_one_process_and_state_dicts_round_trip():
    generator = torch.Generator().manual_seed(0)
    batch = Batch(tensors={"input_ids": torch.randint(5, 128, (4, 12), generator=generator)})
    reference = build_tiny_model(seed=0)
    ref_norm = sgd_step(reference, batch["input_ids"])
    ref_state = {k: v.detach() for k, v in reference.state_dict().items()}

    with LocalWorkerGroup(FSDPWorker, {"seed": 0}, world_size=2, role="actor") as group:
        total = sum(p.numel() for p in reference.parameters())
        assert sum(group.call_all("num_local_elements")) == total  # each rank holds only its shard
        metrics = group.call_sharded_metrics("train_step", batch)
        assert metrics["grad_norm"] == pytest.approx(ref_norm, rel=1e-5)
        assert ref_norm > 1.0  # so the clipping was exercised
        rank0_state, rank1_state = group.call_all("state")
        assert rank1_state == {}
        assert set(rank0_state) == set(ref_state)
        for name, value in ref_state.items():
            torch.testing.assert_close(rank0_state[name], value, atol=1e-5, rtol=0, msg=name)
        everywhere = group.call_all("state", rank0_only=False)
        torch.testing.assert_close(everywhere[1], rank0_state)
        params = group.call_all("full_params")
        for name, value in params[1].items():
            torch.testing.assert_close(value, ref_state[name], atol=1e-5, rtol=0, msg=name)

        fresh = build_tiny_model(seed=1).state_dict()
        group.call_all("load_from_rank0", fresh)
        params = group.call_all("full_params")
        torch.testing.assert_close(params[1]["model.norm.weight"], fresh["model.norm.weight"])
        torch.testing.assert_close(params[0]["model.layers.1.mlp.up_proj.weight"],
                                   fresh["model.layers.1.mlp.up_proj.weight"])


@pytest.mark.slow  # two ranks import transformers and build the model
def test_fsdp2_in_bf16_keeps_the_fp32_residual_stream_the_rollout_engine_shares():
    """FSDP2 casts each unit's inputs to param_dtype by default; the decoder layers' input is the residual
    stream, so a model sharing the engine's numerics (models/numerics.py) must compute as unsharded."""
    from hybridrl.models.numerics import keep_residual_stream_fp32

    ids = torch.randint(5, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    unsharded = build_tiny_model(seed=0)
    for param in unsharded.parameters():  # FSDP2's param_dtype casts parameters only, not RoPE buffers
        param.data = param.data.to(torch.bfloat16)
    with torch.no_grad():
        plain = unsharded(ids).logits.float()
        keep_residual_stream_fp32(unsharded)
        shared = unsharded(ids).logits.float()
    with LocalWorkerGroup(MixedPrecisionLogits, {"seed": 0}, world_size=2, role="actor") as group:
        sharded = group.call_all("logits", ids)
    for logits in sharded:
        torch.testing.assert_close(logits, shared, rtol=0, atol=1e-6)
    assert not torch.allclose(shared, plain, rtol=0, atol=1e-6)  # the 16-bit stream would show


# odd row counts (vocab 131, MLP 67, 1 KV head): 3 ranks hold shards of unequal (and empty) size
UNEVEN = dict(vocab_size=131, hidden_size=32, intermediate_size=67, num_layers=2, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def uneven_group():
    with LocalWorkerGroup(FSDPWorker, {"seed": 3, **UNEVEN}, world_size=3, role="actor") as group:
        yield group


@pytest.fixture(scope="module")
def probe_group():
    from hybridrl.distributed.rank_runtime import COLLECTIVE_TIMEOUT_ENV

    with LocalWorkerGroup(RankProbe, {}, world_size=2, role="actor", env={COLLECTIVE_TIMEOUT_ENV: "123"}) as group:
        yield group


def test_full_params_gathered_per_unit_equal_per_parameter_gathers_with_uneven_shards(uneven_group):
    """One all-gather per FSDP unit gives exactly what gathering each parameter does, under the same names."""
    batched = uneven_group.call_all("full_params")
    one_by_one = uneven_group.call_all("full_params_one_at_a_time")
    want = {k: v for k, v in build_tiny_model(seed=3, **UNEVEN).named_parameters()}
    for rank in range(3):
        assert sorted(batched[rank]) == sorted(one_by_one[rank]) == sorted(want)  # unit by unit: another order
        for name, value in one_by_one[rank].items():
            assert torch.equal(batched[rank][name], value), (rank, name)
            torch.testing.assert_close(value, want[name].detach(), rtol=0, atol=0, msg=name)


def test_full_params_gathered_in_the_receivers_dtype_are_the_cast_weights(uneven_group):
    """Shards cast to bf16 before the gather (half the bytes) give exactly the fp32 weights cast afterwards."""
    gathered = uneven_group.call_all("full_params", torch.bfloat16)
    want = {k: v.detach().to(torch.bfloat16) for k, v in build_tiny_model(seed=3, **UNEVEN).named_parameters()}
    for rank in range(3):
        assert sorted(gathered[rank]) == sorted(want)
        for name, value in gathered[rank].items():
            assert value.dtype == torch.bfloat16 and torch.equal(value, want[name]), (rank, name)


def test_clipping_on_local_shards_matches_torchs_dtensor_clip_with_uneven_shards(uneven_group):
    """One all-reduce over the local shards: the same norm and clipped gradients as torch's clip over the
    DTensors, on 3 ranks with shards of unequal (and empty) size."""
    results = uneven_group.call_all("clip_both_ways", 1.0)
    for rank, result in enumerate(results):
        (norm, grads), (want_norm, want_grads) = result["local_shards"], result["torch"]
        assert norm == pytest.approx(want_norm, rel=1e-5) and want_norm > 1.0, rank  # clipping happened
        for name, grad in grads.items():
            torch.testing.assert_close(grad, want_grads[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("reshard", [True, False])
def test_reshard_after_forward_reaches_every_unit(probe_group, reshard):
    """The role's fsdp_config.reshard_after_forward goes to fully_shard (False: no re-gather in backward)."""
    assert probe_group.call_all("units_resharding_after_forward", reshard) == [[reshard, reshard]] * 2


def test_ranks_take_the_collective_timeout_from_the_environment_the_trainer_sets(probe_group):
    """actor_rollout_ref.nccl_timeout travels to the ranks as HYBRIDRL_COLLECTIVE_TIMEOUT_S (workers/launch)."""
    assert probe_group.call_all("collective_timeout_s") == [123.0, 123.0]
