"""The engine's paged KV cache: one tensor (2, L, num_blocks, block_size, Hkv, D), allocated at each wake-up
and freed at sleep, and whether the decode CUDA graphs captured against it survive that.

On CUDA the cache lives in a `vmm.StableBuffer` when the driver allows it: freed, its memory goes back
to the device but its address stays reserved, so a wake-up with the same number of blocks puts the cache
where the graphs expect it and they replay without being captured again. Otherwise (CPU, or VMM refused)
the cache is an ordinary PyTorch tensor and every wake-up moves it.
"""

from __future__ import annotations

import torch

from hybridrl.logging.log import get_logger
from hybridrl.rollout.engine import vmm
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel

log = get_logger("rollout.kv_cache")


class PagedKVCache:
    """`allocate(num_blocks)` -> whether the cache moved (graphs captured before must go); `free()`."""

    def __init__(self, per_block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                 tp: TensorParallel = SINGLE) -> None:
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.per_block_shape = per_block_shape  # (2, L, block_size, Hkv, D) without the blocks dim
        self.dtype, self.device = dtype, device
        self.block_bytes = torch.empty(per_block_shape, dtype=dtype, device="meta").nbytes  # one block, all layers
        self.tensor: torch.Tensor | None = None
        self._buffer: vmm.StableBuffer | None = None
        self._blocks = 0  # the layout the buffer holds (graphs captured against it stay valid at this size)
        self.stable_address = device.type == "cuda" and _vmm_agreed(device, tp)

    def shape(self, num_blocks: int) -> tuple[int, ...]:
        two, layers, *block = self.per_block_shape
        return (two, layers, num_blocks, *block)

    def allocate(self, num_blocks: int) -> bool:
        """Zero-filled cache of `num_blocks` blocks. True when its address or layout differs from the
        cache freed last (always, without a stable address)."""
        if not self.stable_address:
            self.tensor = torch.zeros(self.shape(num_blocks), dtype=self.dtype, device=self.device)
            return True
        moved = self._buffer is None or num_blocks != self._blocks
        if moved:
            self._close_buffer()
            self._buffer = vmm.StableBuffer(self.device, num_blocks * self.block_bytes)
            self._blocks = num_blocks
        self._buffer.map()
        flat = self._buffer.tensor()[:num_blocks * self.block_bytes]
        self.tensor = flat.view(self.dtype).view(self.shape(num_blocks))
        self.tensor.zero_()
        return moved

    def free(self) -> None:
        """Release the memory (a stable buffer keeps its address for the next `allocate`)."""
        self.tensor = None
        if self._buffer is not None:
            self._buffer.unmap()

    def _close_buffer(self) -> None:
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None


def _vmm_agreed(device: torch.device, tp: TensorParallel) -> bool:
    """Whether this device (and, with tensor parallelism, every rank of the replica) can keep the cache at a
    fixed address: the ranks capture their graphs together (their all-reduces), so they decide together."""
    reason = vmm.unavailable_reason(device.index)
    if reason is not None:
        log.info("KV cache: no fixed-address device memory on %s (%s); decode CUDA graphs are captured again "
                 "after every wake-up", device, reason)
    return tp.agree_min(int(reason is None)) == 1
