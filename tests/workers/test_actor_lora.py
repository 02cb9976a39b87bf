"""LoRA actors on FSDP2 ranks: the rollout sync merges the adapter one unsharded unit at a time, and the
reference is the base with the adapter off (2 gloo ranks; on GPU, NCCL ranks)."""

from __future__ import annotations

import pytest
import torch

from tests.workers.helpers import ragged_batch

SCALE = 8 / 4  # lora_alpha / lora_rank of rank_actor.LORA_FLAGS


def train_lora_ranks(model_dir: str, device: str, world_size: int) -> list[dict]:
    from hybridrl.distributed.local_launcher import LocalWorkerGroup
    from tests.workers.rank_actor import LoraRank

    devices = list(range(world_size)) if device == "cuda" else None
    with LocalWorkerGroup(LoraRank, {"model_dir": model_dir, "device": device}, world_size=world_size,
                          role="lora", device_ids=devices) as group:
        return group.call_all("train", ragged_batch(num_rows=8, seed=3))


def expected_merges(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{HF weight name: W + scale·B@A} in float32, from the gathered PEFT state."""
    merged = {}
    for name, weight in state.items():
        if not name.endswith(".base_layer.weight"):
            continue
        prefix = name[: -len(".base_layer.weight")]
        a, b = state[f"{prefix}.lora_A.default.weight"], state[f"{prefix}.lora_B.default.weight"]
        hf = prefix.removeprefix("base_model.model.") + ".weight"
        merged[hf] = weight.float() + SCALE * (b.float() @ a.float())
    return merged


def base_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{HF weight name: base weight} from the gathered PEFT state (the adapter's own tensors left out)."""
    return {name.removeprefix("base_model.model.").replace(".base_layer.", "."): tensor
            for name, tensor in state.items() if ".lora_" not in name}


def assert_lora_ranks_sync_and_score(ranks: list[dict], rtol: float, atol: float) -> None:
    merges = expected_merges(ranks[0]["state"])
    assert merges and all(rank["state"] == {} for rank in ranks[1:])  # rank 0 holds the gathered state
    for rank in ranks:
        first, deltas = rank["first_sync"], rank["next_sync"]
        base = base_weights(ranks[0]["state"])
        assert set(first) <= set(base) and set(base) - set(first) <= {"lm_head.weight"}  # tied: sent once
        assert set(deltas) == set(merges) < set(first)  # first every weight, then the merged layers only
        for name, tensor in first.items():  # the adapter starts at zero (B = 0): the first sync is the base
            torch.testing.assert_close(tensor.float(), base[name].float(), rtol=rtol, atol=atol, msg=name)
        for name, want in merges.items():
            torch.testing.assert_close(deltas[name].float(), want, rtol=rtol, atol=atol, msg=name)
            assert not torch.allclose(deltas[name].float(), first[name].float()), name  # the adapter trained
        torch.testing.assert_close(rank["reference"], rank["initial"], rtol=rtol, atol=atol)
        assert not torch.allclose(rank["trained"], rank["initial"])


@pytest.mark.slow
def test_two_lora_ranks_sync_merged_units_and_score_the_base_as_reference(tiny_model_dir):
    pytest.importorskip("peft")
    assert_lora_ranks_sync_and_score(train_lora_ranks(tiny_model_dir, "cpu", world_size=2), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_lora_ranks_sync_merged_units_and_score_the_base_as_reference(tiny_model_dir):
    """NCCL ranks (one where one GPU is visible): units unshard on the device in the compute dtype (bf16 on
    GPU), so the merged weights are compared at bf16 precision: ~1 unit in the last place (2**-8 relative)."""
    pytest.importorskip("peft")
    world_size = min(torch.cuda.device_count(), 2)
    assert_lora_ranks_sync_and_score(train_lora_ranks(tiny_model_dir, "cuda", world_size), rtol=1e-2, atol=1e-3)
