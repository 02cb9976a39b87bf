"""Fixed-address device memory (vmm.py) and the KV cache that lives in it (kv_cache.py): memory really goes
back to the device at sleep, comes back at the same address, and decode graphs replay against it."""

from __future__ import annotations

import logging

import pytest
import torch

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine.kv_cache import PagedKVCache
from hybridrl.utils import memory

MIB = 2**20


def test_without_cuda_the_cache_is_a_plain_tensor_that_moves_every_time():
    cache = PagedKVCache((2, 3, 4, 2, 8), torch.float32, torch.device("cpu"))
    assert not cache.stable_address
    assert cache.block_bytes == 2 * 3 * 4 * 2 * 8 * 4
    assert cache.allocate(5) and cache.tensor.shape == (2, 3, 5, 4, 2, 8) and not cache.tensor.any()
    cache.free()
    assert cache.tensor is None
    assert cache.allocate(5)  # a new tensor: graphs captured before could not replay


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA driver")
def test_without_a_driver_the_cache_falls_back_to_pytorch_and_says_why(caplog):
    """No libcuda here: the fixed-address path is refused at construction, with the reason in the log."""
    from hybridrl.rollout.engine import vmm

    vmm.unavailable_reason.cache_clear()
    with caplog.at_level(logging.INFO, logger="hybridrl"):  # conftest hands caplog's handler to hybridrl's logger
        cache = PagedKVCache((2, 3, 4, 2, 8), torch.bfloat16, torch.device("cuda", 0))
    reason = vmm.unavailable_reason(0)  # e.g. "OSError: libcuda.so.1: cannot open shared object file ..."
    assert not cache.stable_address and reason
    told = [r.getMessage() for r in caplog.records if "no fixed-address device memory" in r.getMessage()]
    assert len(told) == 1 and reason in told[0] and "captured again after every wake-up" in told[0]


def test_keep_decode_graphs_reaches_the_engine():
    from hybridrl.config import load_config
    from hybridrl.rollout import build_rollout_backend
    from tests.rollout.engine.helpers import make_model

    cfg = load_config(overrides=["actor_rollout_ref.rollout.keep_decode_graphs=false",
                                 "actor_rollout_ref.rollout.max_model_len=64"])
    engine = build_rollout_backend("hybrid", make_model("qwen2"), pad_token_id=0, eos_token_ids=(),
                                   rollout_cfg=cfg.actor_rollout_ref.rollout, device_type="cpu")
    assert engine.runner.keep_graphs is False


@pytest.mark.gpu
def test_unmapped_memory_goes_back_to_the_device_and_returns_at_the_same_address():
    from hybridrl.rollout.engine import vmm

    assert vmm.unavailable_reason(torch.cuda.current_device()) is None
    device = torch.device("cuda", torch.cuda.current_device())
    buffer = vmm.StableBuffer(device, 256 * MIB)
    external = memory.external_bytes(device)
    buffer.map()
    view = buffer.tensor().view(torch.float32)
    assert view.data_ptr() == buffer.address and view.numel() * 4 == buffer.capacity
    view.fill_(3.0)
    assert view.sum().item() == 3.0 * view.numel()
    assert memory.external_bytes(device) == external + buffer.capacity
    # (measured after the first kernels ran: loading their modules takes device memory too)
    free_mapped, _ = torch.cuda.mem_get_info(device)
    buffer.unmap()
    assert memory.external_bytes(device) == external
    assert torch.cuda.mem_get_info(device)[0] >= free_mapped + buffer.capacity - 4 * MIB
    # The trainer's allocator can take that memory while the buffer is unmapped.
    taken = torch.empty(200 * MIB, dtype=torch.uint8, device=device)
    del taken
    buffer.map()
    again = buffer.tensor().view(torch.float32)
    assert again.data_ptr() == view.data_ptr()
    again.fill_(1.0)
    assert again.sum().item() == again.numel()
    free_mapped, _ = torch.cuda.mem_get_info(device)
    buffer.close()
    assert memory.external_bytes(device) == external
    assert torch.cuda.mem_get_info(device)[0] >= free_mapped + buffer.capacity - 4 * MIB


@pytest.mark.gpu
def test_phase_peaks_count_the_kv_cache_mapped_outside_the_allocator():
    device = torch.device("cuda", torch.cuda.current_device())
    cache = PagedKVCache((2, 4, 16, 2, 64), torch.bfloat16, device)
    base = memory.allocated_bytes(device)  # what earlier tests in this process still hold
    tracker = memory.PhaseMemory(device)
    with tracker.phase("gen"):
        cache.allocate(512)  # 512 blocks x 32 KiB = 16 MiB
        cache.free()
    with tracker.phase("update_actor"):
        torch.empty(4 * MIB, dtype=torch.uint8, device=device)
    peaks = tracker.pop_metrics()
    assert peaks[f"{memory.PREFIX}/gen"] * 2**30 >= base + 16 * MIB
    assert peaks[f"{memory.PREFIX}/update_actor"] * 2**30 < base + 16 * MIB


@pytest.mark.gpu
def test_engine_keeps_its_graphs_across_sleep_while_the_memory_is_used_by_others(caplog):
    """sleep -> the trainer fills the freed memory with NaNs -> wake_up: the same tokens, no capture, the
    same cache address; a smaller cache at wake-up (memory short) moves it and the graphs are captured again."""
    from tests.rollout.engine.helpers import PROMPTS, make_model

    from hybridrl.rollout.engine.llm_engine import LLMEngine

    model = make_model("qwen2", hidden_size=64, num_heads=4, num_kv_heads=2)
    params = SamplingParams(n=3, max_new_tokens=40, seed=5, eos_token_ids=(5, 9))  # lengths vary: several sizes
    engine = LLMEngine(model, device="cuda", num_kv_blocks=256, block_size=4, max_num_seqs=16,
                       cudagraph_capture_sizes=[1, 2, 4, 8])
    first = engine.generate(PROMPTS, params)
    address, graphs = engine.runner.kv_cache.data_ptr(), engine.runner.graph_runner
    captured, capture_s = graphs.captured_sizes, graphs.capture_time_s
    assert captured and graphs.held_bytes > 0
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        engine.sleep()
        engine.wake_up()
        engine.sleep()
    told = [r.getMessage() for r in caplog.records if "graphs are kept" in r.getMessage()]
    assert len(told) == 1 and "GiB held" in told[0] and "keep_decode_graphs=false" in told[0]
    trainer = torch.full((engine.kv_cache_bytes // 4,), float("nan"), device="cuda")
    del trainer
    engine.wake_up()
    second = engine.generate(PROMPTS, params)
    assert second.token_ids == first.token_ids and second.log_probs == first.log_probs
    assert engine.runner.kv_cache.data_ptr() == address and graphs.capture_time_s == capture_s
    assert graphs.captured_sizes == captured
    engine.sleep()
    engine.planned_kv_blocks = 128  # as when the trainer holds more memory at a wake-up
    engine.wake_up()
    assert not graphs.captured and engine.runner.kv_cache.shape[2] == 128
    assert engine.generate(PROMPTS, params).token_ids == first.token_ids
    assert graphs.capture_time_s > capture_s
