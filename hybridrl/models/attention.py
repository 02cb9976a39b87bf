"""The attention hybridrl's HF models run: transformers' SDPA attention with PyTorch's cuDNN backend left out.

PyTorch picks cuDNN's fused attention on Hopper when it can. cuDNN builds (and compiles) an execution graph
for every new input shape, and a trainer sees a new shape almost every micro-batch: token-budget
micro-batches differ in rows and in length. Each build costs tens of milliseconds of host time while the
device waits, once per shape, forward and backward (H200, Qwen2.5-0.5B shape, async_bench's long-tail
workload: the device sat idle for 0.84 s of the reference pass's 1.56 s in gaps of over 1 ms, and the
largest gaps were all inside cuDNN attention calls; benchmarks/README.md). The flash and memory-efficient
kernels need no per-shape build, so hybridrl's models attend through them (and the math kernel where neither
takes the inputs): the same attention, the same masks, another kernel.

`use_shape_agnostic_sdpa(model)` routes a model built with `attn_implementation="sdpa"` through transformers'
own SDPA attention run without cuDNN, registered with transformers' attention and mask interfaces under
`ATTENTION_NAME` (masks are built exactly as for "sdpa"). Models on another implementation are left as they are.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ATTENTION_NAME = "hybridrl_sdpa"
# In PyTorch's order of preference: flash (causal, unmasked: the aligned rows of use_remove_padding), the
# memory-efficient kernel (masks), math (whatever neither takes).
SHAPE_AGNOSTIC_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def without_cudnn_attention() -> contextlib.AbstractContextManager:
    """Around a `F.scaled_dot_product_attention` call: any backend but cuDNN."""
    return sdpa_kernel(list(SHAPE_AGNOSTIC_BACKENDS))


def _without_cudnn(attention: Callable[..., tuple[torch.Tensor, None]]) -> Callable[..., tuple[torch.Tensor, None]]:
    """`attention` (transformers' signature: module, query, key, value, attention_mask, **kwargs), run without the
    cuDNN backend."""
    @functools.wraps(attention)
    def attend(*args, **kwargs) -> tuple[torch.Tensor, None]:
        with without_cudnn_attention():
            return attention(*args, **kwargs)

    return attend


def use_shape_agnostic_sdpa(model: torch.nn.Module) -> None:
    """Route `model`'s attention through transformers' `sdpa_attention_forward` without the cuDNN backend when it
    runs transformers' "sdpa" (and transformers has the attention and mask interfaces, 4.53 on; older releases
    keep "sdpa" with PyTorch's own choice)."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return
    AttentionInterface.register(ATTENTION_NAME, _without_cudnn(sdpa_attention_forward))
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    config._attn_implementation = ATTENTION_NAME
