"""Ulysses sequence parallelism: a group of ranks, each forwarding a slice of every sequence, computes the
log-probs, entropies, Σπ², values and (averaged) gradients one process computes on whole sequences."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed.local_launcher import LocalWorkerGroup
from hybridrl.models.tiny import build_tiny_model
from tests.workers.helpers import ragged_batch
from tests.workers.ulysses_ranks import UlyssesRank, critic_model, outputs_and_gradients

# 4 query heads, 2 key/value heads: 4 ranks repeat each kv head twice
CONFIG = dict(num_heads=4, num_kv_heads=2, vocab_size=64)


def _expected(batch, remove_padding: bool, critic: bool) -> dict:
    model = critic_model(0, **CONFIG) if critic else build_tiny_model(seed=0, **CONFIG)
    return outputs_and_gradients(model, batch, remove_padding, critic)


def _assert_same(got: dict, want: dict, mask: torch.Tensor) -> None:
    """Outputs where response_mask is 1 (at padding each path attends as it likes: nothing reads them)."""
    for key, value in want["outputs"].items():
        torch.testing.assert_close(got["outputs"][key] * mask, value * mask, atol=2e-5, rtol=1e-4, msg=key)
    for name, grad in want["grads"].items():
        torch.testing.assert_close(got["grads"][name], grad, atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.slow  # the roles' tests (test_sequence_parallel_roles.py) cover 2 ranks in the default suite
@pytest.mark.parametrize("ranks", [2, 4])
def test_a_group_matches_one_process_for_log_probs_and_gradients(ranks):
    # 17 + 9 = 26 columns: not a multiple of 4, so the sequence is padded; both layouts of remove_padding
    batch = ragged_batch(num_rows=5, prompt_width=17, response_width=9, seed=1, token_range=(5, 60))
    with LocalWorkerGroup(UlyssesRank, {"sp": ranks, **CONFIG}, world_size=ranks, role="actor") as group:
        for remove_padding in (False, True):
            want = _expected(batch, remove_padding, critic=False)
            for got in group.call_all("run", batch, remove_padding):
                _assert_same(got, want, batch["response_mask"])


@pytest.mark.slow  # the roles' test (test_sequence_parallel_roles.py) covers the critic in the default suite
def test_a_critic_group_matches_one_process_for_values_and_gradients():
    batch = ragged_batch(num_rows=4, prompt_width=11, response_width=8, seed=2, token_range=(5, 60))
    with LocalWorkerGroup(UlyssesRank, {"sp": 2, "critic": True, **CONFIG}, world_size=2, role="critic") as group:
        for remove_padding in (False, True):
            want = _expected(batch, remove_padding, critic=True)
            for got in group.call_all("run", batch, remove_padding):
                _assert_same(got, want, batch["response_mask"])


@pytest.mark.gpu
def test_ulysses_attention_in_compiled_bf16_layers_on_cuda_matches_sdpa():
    """One CUDA rank (a group of one: the all-to-alls are copies): Ulysses attention runs between the compiled
    halves of each decoder layer (torch.compiler.disable) and gives SDPA's log-probs and gradients in bf16."""
    import socket

    import torch.distributed as dist

    from hybridrl.distributed.ulysses import ulysses_group
    from hybridrl.models.compile import compile_decoder_layers
    from hybridrl.distributed.ulysses_attention import enable_ulysses
    from hybridrl.workers.sequence_split import ULYSSES_ATTR

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        config = dict(num_heads=8, num_kv_heads=2, hidden_size=256, intermediate_size=512, vocab_size=512,
                      dtype=torch.bfloat16)
        batch = ragged_batch(num_rows=6, prompt_width=40, response_width=30, seed=3, token_range=(5, 500)).to("cuda")
        results = []
        for ulysses in (False, True):
            model = build_tiny_model(seed=0, **config).cuda()
            compile_decoder_layers(model, torch.device("cuda"), "actor", enabled=True, off_key="k")
            if ulysses:
                sp = ulysses_group(1)
                enable_ulysses(model, sp, "k")
                setattr(model, ULYSSES_ATTR, sp)
            results.append(outputs_and_gradients(model, batch, remove_padding=True, critic=False))
        plain, split = results
        mask = batch["response_mask"].bool()
        torch.testing.assert_close(split["outputs"]["log_probs"][mask], plain["outputs"]["log_probs"][mask],
                                   atol=2e-2, rtol=2e-2)
        for name, grad in plain["grads"].items():
            assert ((split["grads"][name].float() - grad.float()).norm() / grad.float().norm()) < 2e-2, name
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two ranks per architecture
@pytest.mark.parametrize("arch, extra", [("qwen3", {}), ("llama", {}), ("phi3", {}),
                                         ("mistral", {"sliding_window": 8})])  # a window shorter than the rows
def test_each_architecture_matches_one_process(arch, extra):
    config = dict(CONFIG, arch=arch, **extra)
    batch = ragged_batch(num_rows=4, prompt_width=13, response_width=9, seed=4, token_range=(5, 60))
    with LocalWorkerGroup(UlyssesRank, {"sp": 2, **config}, world_size=2, role="actor") as group:
        for remove_padding in (False, True):
            want = outputs_and_gradients(build_tiny_model(seed=0, **config), batch, remove_padding, critic=False)
            for got in group.call_all("run", batch, remove_padding):
                _assert_same(got, want, batch["response_mask"])
