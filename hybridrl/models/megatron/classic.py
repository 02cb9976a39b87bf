"""Reading a classic (`mp_rank_XX[_YYY]/model_optim_rng.pt`) Megatron checkpoint into canonical weights.

Each shard holds one (TP rank, PP stage)'s local module state: column-parallel weights (QKV, fc1,
vocabulary) are row slices, row-parallel ones (attention output, fc2) column slices, norms full copies.
A stage numbers its layers from 0, so stages are concatenated with a layer offset; with virtual pipeline
parallelism a shard holds `model0..modelN` chunks, and global layer order is chunk-major then stage.
"""

from __future__ import annotations

import argparse

import torch

from hybridrl.models.megatron.keys import (canonicalize, flatten, is_gated_fc1, num_layers_in, offset_layers,
                                           tp_dim)
from hybridrl.models.megatron.layout import MegatronCheckpointError, MegatronLayout


def read_shard(path: str) -> dict:
    """Load one shard file. Megatron pickles `args` (argparse.Namespace), so weights_only=False: only load
    checkpoints you trust. mmap keeps the optimizer state, which is never used, out of memory."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # files in the pre-1.6 (non-zip) format cannot be memory-mapped
        return torch.load(path, map_location="cpu", weights_only=False)


def model_chunks(ckpt: dict, path: str) -> list[dict[str, torch.Tensor]]:
    """Canonical weights of each model chunk in a shard (one, or one per virtual pipeline stage)."""
    if "model" in ckpt:
        return [canonicalize(flatten(ckpt["model"]))]
    names = sorted((k for k in ckpt if isinstance(k, str) and k[5:].isdigit() and k.startswith("model")),
                   key=lambda k: int(k[5:]))
    if not names:
        raise MegatronCheckpointError(f"{path} has no 'model' entry (top-level keys: {sorted(map(str, ckpt))[:8]})")
    return [canonicalize(flatten(ckpt[name])) for name in names]


def _check_version(ckpt: dict, path: str) -> None:
    version = ckpt.get("checkpoint_version", 3.0)
    if version < 2.0:
        raise MegatronCheckpointError(f"{path} has checkpoint_version {version}; its QKV layout predates "
                                      "Megatron-LM's 2.0 format. Supported: checkpoint_version >= 2.0")


def merge_tp(shards: list[dict[str, torch.Tensor]], where: str) -> dict[str, torch.Tensor]:
    """Full tensors from the TP ranks' slices (SwiGLU fc1 becomes [full gate; full up])."""
    keys = set(shards[0])
    for rank, shard in enumerate(shards[1:], start=1):
        if set(shard) != keys:
            raise MegatronCheckpointError(f"{where}: TP rank {rank} has different weights from rank 0 "
                                          f"(e.g. {sorted(set(shard) ^ keys)[:3]})")
    merged = {}
    for key in shards[0]:
        parts = [s[key] for s in shards]
        dim = tp_dim(key)
        if dim is None:
            merged[key] = parts[0]
        elif is_gated_fc1(key) and len(parts) > 1:
            halves = [torch.chunk(p, 2, dim=0) for p in parts]
            merged[key] = torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
        else:
            merged[key] = torch.cat(parts, dim=dim)
    return merged


def _check_parallel_sizes(args: argparse.Namespace | None, layout: MegatronLayout) -> None:
    """The directory names and the saved args must agree; otherwise shards of two runs are mixed."""
    for name, found in (("tensor_model_parallel_size", layout.tp_size), ("pipeline_model_parallel_size",
                                                                          layout.pp_size)):
        saved = getattr(args, name, None)
        if saved is not None and int(saved) != found:
            raise MegatronCheckpointError(f"{layout.iter_dir}: the shard directories give {name}={found} but the "
                                          f"checkpoint args say {saved}; the directory mixes checkpoints of "
                                          "different parallel layouts")


def _read_stage(layout: MegatronLayout, pp: int) -> tuple[list[dict[str, torch.Tensor]], argparse.Namespace | None]:
    """TP-merged chunks of pipeline stage `pp`, and the args of its first shard."""
    per_rank, args = [], None
    for tp in range(layout.tp_size):
        path = layout.shards[(tp, pp)]
        ckpt = read_shard(path)
        _check_version(ckpt, path)
        args = args if args is not None else ckpt.get("args")
        per_rank.append(model_chunks(ckpt, path))
    if len({len(c) for c in per_rank}) != 1:
        raise MegatronCheckpointError(f"{layout.iter_dir}: TP ranks of stage {pp} hold different numbers of "
                                      "virtual pipeline chunks")
    where = f"{layout.iter_dir} stage {pp}"
    return [merge_tp([chunks[v] for chunks in per_rank], where) for v in range(len(per_rank[0]))], args


def read_classic(layout: MegatronLayout) -> tuple[dict[str, torch.Tensor], argparse.Namespace | None]:
    """Canonical TP=1 weights with global layer indices, and the checkpoint's args (None if absent)."""
    stages, args = [], None
    for pp in range(layout.pp_size):
        chunks, stage_args = _read_stage(layout, pp)
        stages.append(chunks)
        args = args if args is not None else stage_args
    _check_parallel_sizes(args, layout)
    if len({len(chunks) for chunks in stages}) != 1:
        raise MegatronCheckpointError(f"{layout.iter_dir}: pipeline stages hold different numbers of virtual "
                                      "pipeline chunks")
    merged, offset = {}, 0
    for v in range(len(stages[0])):
        for pp in range(layout.pp_size):
            chunk = stages[pp][v]
            for key, value in offset_layers(chunk, offset).items():
                merged.setdefault(key, value)  # a tied model's last stage repeats output_layer: first wins
            offset += num_layers_in(chunk)
    return merged, args
