"""Ulysses attention for HF models, registered with transformers' `AttentionInterface`.

`enable_ulysses(model, sp)` makes every attention layer of `model` run `ulysses_attention`: the layer's
q/k/v of this rank's sequence slice go through an all-to-all to `heads / sp` heads over the whole sequence,
SDPA runs there (causal, or with the full-sequence mask the caller passed; without the cuDNN backend, for the
reason `models/attention.py` gives), and the inverse all-to-all brings the slice's tokens back with every
head. The callers (`workers.sequence_split`) cut the sequence and pass either no mask (rows aligned left:
causal is exact) or a 4D boolean mask over the whole padded sequence, which transformers hands to the
attention function unchanged.

Key/value heads are repeated when there are fewer than `sp` of them (or they do not divide by `sp`), as verl
does. A sliding window (Mistral, Qwen2's sliding layers) is applied over the gathered sequence as a band mask when
the sequence is longer than the window (transformers' rule: a key is visible within `window` positions). Logit
soft-capping and attention sinks are refused: SDPA has neither.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hybridrl.distributed.ulysses import UlyssesGroup, heads_to_sequence, sequence_to_heads
from hybridrl.models.attention import without_cudnn_attention

ATTENTION_NAME = "hybridrl_ulysses"
_GROUP_ATTR = "_hybridrl_ulysses_group"


class UlyssesModelError(ValueError):
    """The model cannot run Ulysses sequence parallelism at this size."""


def enable_ulysses(model: torch.nn.Module, sp: UlyssesGroup, size_key: str) -> None:
    """Route `model`'s attention through `ulysses_attention` over `sp`; `size_key` names the setting in errors."""
    from transformers import AttentionInterface

    config = model.config
    heads = int(config.num_attention_heads)
    if heads % sp.size:
        raise UlyssesModelError(
            f"{size_key}={sp.size} must divide the model's {heads} attention heads (each rank of a group attends "
            f"with heads / size of them); choose a divisor of {heads}")
    _kv_repeats(heads, int(getattr(config, "num_key_value_heads", None) or heads), sp.size, size_key)
    AttentionInterface.register(ATTENTION_NAME, ulysses_attention)
    attention_layers = [module for module in model.modules() if hasattr(module, "q_proj") or hasattr(module, "qkv_proj")]
    if not attention_layers:
        raise UlyssesModelError(f"{type(model).__name__} has no attention layers hybridrl recognises (q_proj or "
                                f"qkv_proj); set {size_key}=1 for this model")
    for module in attention_layers:
        setattr(module, _GROUP_ATTR, sp)
    config._attn_implementation = ATTENTION_NAME


def _kv_repeats(heads: int, kv_heads: int, size: int, size_key: str) -> int:
    """How many times each key/value head is repeated so that the kv heads split evenly over `size` ranks while
    each query head still meets its own kv head (the repeat count divides heads / kv_heads)."""
    group = heads // kv_heads
    for repeats in range(1, group + 1):
        if group % repeats == 0 and (kv_heads * repeats) % size == 0:
            return repeats
    raise UlyssesModelError(f"{size_key}={size} cannot split the model's {kv_heads} key/value heads "
                            f"({heads} query heads); choose a divisor of {heads}")


@torch.compiler.disable  # collectives: compiled decoder layers break their graph around attention
def ulysses_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None, softcap: float | None = None, **kwargs
                      ) -> tuple[torch.Tensor, None]:
    """q (B, H, T/sp, D), k/v (B, KV, T/sp, D) of this rank's slice → (B, T/sp, H, D), as transformers' SDPA
    attention returns it."""
    sp: UlyssesGroup = getattr(module, _GROUP_ATTR)
    _refuse_unsupported(softcap, kwargs)
    heads, kv_heads = query.shape[1], key.shape[1]
    repeats = _kv_repeats(heads, kv_heads, sp.size, "ulysses_sequence_parallel_size")
    if repeats > 1:
        key, value = (t.repeat_interleave(repeats, dim=1) for t in (key, value))
    query, key, value = (heads_to_sequence(t, sp) for t in (query, key, value))
    mask = attention_mask
    if mask is not None and mask.dtype != torch.bool:
        mask = mask >= 0  # an additive float mask: 0 where attended
    length = query.shape[2]
    if sliding_window is not None and length > sliding_window:
        band = _sliding_window_band(length, sliding_window, query.device)
        mask = band if mask is None else mask & band
    with without_cudnn_attention():  # as the models' own attention (models/attention.py)
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, is_causal=mask is None, dropout_p=dropout if module.training else 0.0,
            scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return sequence_to_heads(out, sp).transpose(1, 2).contiguous(), None


def _sliding_window_band(length: int, window: int, device: torch.device) -> torch.Tensor:
    """(T, T) bool: query i sees key j when i - window < j <= i (causal within the window)."""
    offsets = torch.arange(length, device=device)
    distance = offsets[:, None] - offsets[None, :]
    return (distance >= 0) & (distance < window)


def _refuse_unsupported(softcap: float | None, kwargs: dict) -> None:
    unsupported = [name for name, present in (("attention logit soft-capping", softcap is not None),
                                              ("attention sinks", kwargs.get("s_aux") is not None)) if present]
    if unsupported:
        raise UlyssesModelError(f"Ulysses sequence parallelism does not support {' or '.join(unsupported)}, which "
                                "this model uses; set the role's ulysses_sequence_parallel_size=1")
