"""How many KV blocks a generation gets: planned at start-up, re-checked against free memory at each wake-up.

The start-up plan (`LLMEngine._profile_num_kv_blocks`) sees the memory free then. In hybrid mode the cache is
freed after every generation and allocated again at the next one, by which time the trainer may hold more
(optimizer state created by the first step, compile workspaces, a larger batch's buffers): allocating the
planned cache anyway left generation's own activations (the decode logits: max_num_seqs x vocab) without
room, an out-of-memory error mid-rollout (H200, 11,008 sequences: 3.1 GiB of logits, 2.7 GiB free). A
smaller cache only makes large batches preempt sequences, which changes speed, not results.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
MARGIN_BYTES = 512 << 20  # allocator rounding and fragmentation


@dataclass(frozen=True)
class CacheSize:
    blocks: int
    warning: str | None  # set when the cache is smaller than planned


def fitting_blocks(free_bytes: int, activation_bytes: int, block_bytes: int) -> int:
    """KV blocks that fit in `free_bytes` beside generation's activations and the margin (may be < 1)."""
    return (free_bytes - activation_bytes - MARGIN_BYTES) // block_bytes


def blocks_for_generation(planned: int, free_bytes: int, activation_bytes: int, block_bytes: int,
                          gpu_memory_utilization: float) -> CacheSize:
    """The planned blocks, or as many as fit beside generation's activations in `free_bytes` when fewer do.
    Raises RuntimeError, naming what to change, when not one block fits."""
    fitting = fitting_blocks(free_bytes, activation_bytes, block_bytes)
    if fitting >= planned:
        return CacheSize(planned, None)
    remedy = (f"lower actor_rollout_ref.rollout.gpu_memory_utilization (now {gpu_memory_utilization}) so the cache "
              "is planned for what is free while generating, or free trainer memory during generation: "
              "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true, "
              "actor_rollout_ref.ref.fsdp_config.param_offload=true")
    memory = (f"{free_bytes / GIB:.2f} GiB is free now and generation needs ~{activation_bytes / GIB:.2f} GiB "
              "beside the cache")
    if fitting < 1:
        raise RuntimeError(f"no memory left for the rollout's KV cache at wake-up: {memory}. To fix: {remedy}")
    return CacheSize(int(fitting), (
        f"KV cache for this generation: {fitting} blocks ({fitting * block_bytes / GIB:.2f} GiB) instead of the "
        f"{planned} planned at start-up: {memory} (the trainer holds more than when the engine started). Batches "
        f"that need more blocks preempt sequences (slower, same tokens). To avoid it: {remedy}"))
