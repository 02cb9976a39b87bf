"""Writing canonical weights as a classic Megatron checkpoint (`mp_rank_XX[_YYY]/model_optim_rng.pt`).

Each shard is what a megatron-core `GPTModel` of that (TP rank, PP stage) returns from `state_dict()`,
so `model.load_state_dict(ckpt["model"])` works; `args` carries the architecture for
Megatron-LM's `--use-checkpoint-args` and for this package's loader.
"""

from __future__ import annotations

import os

import torch

from hybridrl.models.megatron.hf_map import hf_to_megatron
from hybridrl.models.megatron.keys import LAYER_KEY, is_gated_fc1, tp_dim
from hybridrl.models.megatron.layout import SHARD_FILE, TRACKER, MegatronCheckpointError
from hybridrl.models.megatron.spec import GptSpec, args_from_spec, padded_vocab_size

IMPLS = ("transformer_engine", "local")
# Modules whose state dict has an `_extra_state` entry (None when no FP8 metadata) in each layer spec.
_EXTRA_STATE = {"local": ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1",
                          "mlp.linear_fc2"),
                "transformer_engine": ("self_attention.linear_qkv", "self_attention.linear_proj",
                                       "self_attention.core_attention", "mlp.linear_fc1", "mlp.linear_fc2")}
_TE_NAMES = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
             "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight"}


def check_divisible(spec: GptSpec, tp: int, pp: int) -> None:
    """Megatron's own constraints on TP/PP sizes, checked before anything is written."""
    rules = [("num_query_groups (key/value heads)", spec.num_kv_heads, tp), ("num_attention_heads", spec.num_heads, tp),
             ("ffn_hidden_size", spec.ffn_hidden_size, tp), ("num_layers", spec.num_layers, pp)]
    for name, value, size in rules:
        if size < 1 or value % size:
            raise MegatronCheckpointError(f"{name}={value} is not divisible by the parallel size {size}; "
                                          "choose --tp/--pp dividing it")


def split_tp(state: dict[str, torch.Tensor], tp: int) -> list[dict[str, torch.Tensor]]:
    """Per-rank slices (inverse of merge_tp): SwiGLU fc1 rank r gets [gate_r; up_r]."""
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(tp)]
    for key, value in state.items():
        dim = tp_dim(key)
        if dim is None:
            parts = [value] * tp
        elif is_gated_fc1(key):
            gate, up = (torch.chunk(half, tp, dim=0) for half in torch.chunk(value, 2, dim=0))
            parts = [torch.cat([g, u]) for g, u in zip(gate, up)]
        else:
            parts = list(torch.chunk(value, tp, dim=dim))
        for shard, part in zip(shards, parts):
            shard[key] = part.clone()  # a view would save its whole base storage
    return shards


def split_pp(state: dict[str, torch.Tensor], pp: int, spec: GptSpec) -> list[dict[str, torch.Tensor]]:
    """Per-stage weights with stage-local layer indices; embedding on the first stage, head on the last."""
    per_stage = spec.num_layers // pp
    stages: list[dict[str, torch.Tensor]] = [{} for _ in range(pp)]
    for key, value in state.items():
        m = LAYER_KEY.match(key)
        if m:
            layer = int(m.group(1))
            stages[layer // per_stage][f"decoder.layers.{layer % per_stage}.{m.group(2)}"] = value
        elif key.startswith("embedding."):
            stages[0][key] = value
        else:
            stages[-1][key] = value
    if spec.tie_embeddings and pp > 1:  # mcore's last stage holds a copy of the shared embedding
        stages[-1]["output_layer.weight"] = state["embedding.word_embeddings.weight"]
    return stages


def to_impl_names(state: dict[str, torch.Tensor], impl: str, last_stage: bool) -> dict:
    """Rename pre-norms for TransformerEngine and add the `_extra_state` entries a strict load expects
    (the last stage's output layer has one even when tied, i.e. without a weight of its own)."""
    out: dict = {}
    modules = set()
    for key, value in state.items():
        m = LAYER_KEY.match(key)
        if m and impl == "transformer_engine" and m.group(2) in _TE_NAMES:
            key = f"decoder.layers.{m.group(1)}.{_TE_NAMES[m.group(2)]}"
        out[key] = value
        if m:
            modules.add(f"decoder.layers.{m.group(1)}.")
    for prefix in sorted(modules):
        out.update({f"{prefix}{name}._extra_state": None for name in _EXTRA_STATE[impl]})
    if last_stage:
        out["output_layer._extra_state"] = None
    return out


def _shard_dir(out_dir: str, tp: int, pp: int, pp_size: int) -> str:
    name = f"mp_rank_{tp:02d}" if pp_size == 1 else f"mp_rank_{tp:02d}_{pp:03d}"
    return os.path.join(out_dir, name)


def write_classic(out_dir: str, state: dict[str, torch.Tensor], spec: GptSpec, *, tp: int, pp: int = 1,
                  transformer_impl: str = "transformer_engine", iteration: int | None = None,
                  divisible_by: int = 128) -> str:
    """Write canonical weights as a classic checkpoint under `out_dir`; returns the iteration directory."""
    if transformer_impl not in IMPLS:
        raise MegatronCheckpointError(f"transformer_impl={transformer_impl!r}; choose one of {IMPLS}")
    check_divisible(spec, tp, pp)
    dtype = state["embedding.word_embeddings.weight"].dtype
    args = args_from_spec(spec, tp_size=tp, pp_size=pp, divisible_by=divisible_by, transformer_impl=transformer_impl,
                          padded_vocab=state["embedding.word_embeddings.weight"].shape[0], dtype=dtype,
                          iteration=iteration or 0)
    iter_dir = os.path.join(out_dir, "release" if iteration is None else f"iter_{iteration:07d}")
    for p, stage in enumerate(split_pp(state, pp, spec)):
        for t, shard in enumerate(split_tp(stage, tp)):
            os.makedirs(_shard_dir(iter_dir, t, p, pp), exist_ok=True)
            ckpt = {"args": args, "checkpoint_version": 3.0, "iteration": iteration or 0,
                    "model": to_impl_names(shard, transformer_impl, last_stage=p == pp - 1)}
            torch.save(ckpt, os.path.join(_shard_dir(iter_dir, t, p, pp), SHARD_FILE))
    with open(os.path.join(out_dir, TRACKER), "w") as f:
        f.write("release" if iteration is None else str(iteration))
    return iter_dir


def save_hf_as_megatron(hf_state: dict[str, torch.Tensor], spec: GptSpec, out_dir: str, *, tp: int, pp: int = 1,
                        transformer_impl: str = "transformer_engine", iteration: int | None = None,
                        divisible_by: int = 128) -> str:
    """HF state dict -> classic Megatron checkpoint (vocabulary padded to divisible_by * tp)."""
    padded = padded_vocab_size(spec.vocab_size, tp, divisible_by)
    state = hf_to_megatron(hf_state, spec, padded)
    return write_classic(out_dir, state, spec, tp=tp, pp=pp, transformer_impl=transformer_impl,
                         iteration=iteration, divisible_by=divisible_by)
