"""Rotary position embeddings as the rollout engine holds them: one cos/sin table over positions.

The engine rotates q/k by rows of this table; with `actor_rollout_ref.model.batch_invariant` the trainer's HF model
reads its cos/sin from the same table (models/invariant/hf.py), so both sides rotate by the same values.
"""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """cos/sin table over positions from HF-style inverse frequencies; rotates the first rot_dim dims."""

    def __init__(self, inv_freq: torch.Tensor, attention_scaling: float, max_positions: int) -> None:
        super().__init__()
        t = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq.to(t.device, torch.float32))  # (P, rot_dim / 2)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.rot_dim = emb.shape[-1]
        self.register_buffer("cos", emb.cos() * attention_scaling, persistent=False)
        self.register_buffer("sin", emb.sin() * attention_scaling, persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (N, Hq, D), k (N, Hkv, D) rotated at positions (N,). Math in the activation dtype, as HF."""
        cos = self.cos[positions].to(q.dtype)[:, None]  # (N, 1, rot_dim)
        sin = self.sin[positions].to(q.dtype)[:, None]
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x_rot, x_pass = x[..., :self.rot_dim], x[..., self.rot_dim:]
        x1, x2 = x_rot.chunk(2, dim=-1)
        rotated = x_rot * cos + torch.cat([-x2, x1], dim=-1) * sin
        return torch.cat([rotated, x_pass], dim=-1) if x_pass.shape[-1] else rotated


def build_rotary(config: object, head_dim: int, max_positions: int) -> RotaryEmbedding:
    """RoPE as the HF config sets it (`rope_parameters` / `rope_scaling`: default, linear, llama3, yarn, ...).

    Inverse frequencies come from transformers' own RoPE initialisers, so every scaling type matches HF.
    `dynamic` NTK is evaluated once at `max_positions` (as vLLM does) rather than per batch; `longrope`
    uses its short factors (HF switches to the long ones past original_max_position_embeddings).
    """
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        rot_dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
        # on the CPU, as HF computes it when it builds the model: `pow` rounds differently on a GPU
        inv_freq = 1.0 / theta ** (torch.arange(0, rot_dim, 2, dtype=torch.int64, device="cpu").float() / rot_dim)
        return RotaryEmbedding(inv_freq, 1.0, max_positions)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise NotImplementedError(f"rope type {rope_type!r} is not supported by the hybrid engine; "
                                  f"supported: default, {', '.join(ROPE_INIT_FUNCTIONS)}")
    seq_len = None
    if rope_type == "dynamic":
        seq_len = max(max_positions, config.max_position_embeddings)
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return RotaryEmbedding(inv_freq, scaling, max_positions)
