"""Reading a megatron-core `torch_dist` checkpoint (torch.distributed.checkpoint) into canonical weights.

The store holds global (unsharded) tensors, so no TP merge is needed; loading them in one process
needs no megatron-core. Homogeneous layers are stacked on a leading layer axis
(`decoder.layers.self_attention.linear_qkv.weight`: `(num_layers, out, in)`); SwiGLU fc1 is stored as
[full gate; full up], or as separate `..._w` / `..._v` tensors with `singleton_local_shards`.
"""

from __future__ import annotations

import argparse
import os
import re
import warnings

import torch

from hybridrl.models.megatron.keys import canonicalize
from hybridrl.models.megatron.layout import MegatronCheckpointError, MegatronLayout

_MODEL_PREFIXES = ("embedding.", "decoder.", "output_layer.", "model.", "language_model.")


def _read_tensors(iter_dir: str) -> dict[str, torch.Tensor]:
    """All model tensors of the store (optimizer and RNG entries skipped), loaded whole on CPU."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(iter_dir)
    metadata = reader.read_metadata().state_dict_metadata
    state = {key: torch.empty(meta.size, dtype=meta.properties.dtype) for key, meta in metadata.items()
             if isinstance(meta, TensorStorageMetadata) and key.startswith(_MODEL_PREFIXES)}
    if not state:
        raise MegatronCheckpointError(f"{iter_dir}: the distributed checkpoint holds no model tensors "
                                      f"(keys: {sorted(metadata)[:6]})")
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=reader, no_dist=True)
    return state


def _unstack_layers(state: dict[str, torch.Tensor], num_layers: int | None) -> dict[str, torch.Tensor]:
    """`decoder.layers.<name>` of shape (L, ...) -> `decoder.layers.<i>.<name>` for each i."""
    out = {}
    for key, value in state.items():
        m = re.match(r"^decoder\.layers\.(?!\d+\.)(.+)$", key)
        if not m:
            out[key] = value
            continue
        if num_layers is not None and value.shape[0] != num_layers:
            raise MegatronCheckpointError(f"{key} stacks {value.shape[0]} layers; args say {num_layers}")
        for i in range(value.shape[0]):
            out[f"decoder.layers.{i}.{m.group(1)}"] = value[i]
    return out


def _join_swiglu_halves(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`linear_fc1.weight_w` (gate) + `linear_fc1.weight_v` (up) -> `linear_fc1.weight`."""
    out = {}
    for key, value in state.items():
        if key.endswith(("linear_fc1.weight_v", "linear_fc1.bias_v")):
            continue
        if key.endswith(("linear_fc1.weight_w", "linear_fc1.bias_w")):
            # the output-feature axis: last but one of a weight, last of a bias (a layer axis may lead)
            out[key[:-2]] = torch.cat([value, state[key[:-1] + "v"]], dim=-2 if ".weight_" in key else -1)
        else:
            out[key] = value
    return out


def _read_args(iter_dir: str) -> argparse.Namespace | None:
    path = os.path.join(iter_dir, "common.pt")
    if not os.path.isfile(path):
        return None
    common = torch.load(path, map_location="cpu", weights_only=False)  # pickled args: trusted files only
    args = common.get("args") if isinstance(common, dict) else None
    return args if isinstance(args, argparse.Namespace) else None


def read_dist(layout: MegatronLayout) -> tuple[dict[str, torch.Tensor], argparse.Namespace | None]:
    """Canonical TP=1 weights with global layer indices, and the args saved in `common.pt`."""
    args = _read_args(layout.iter_dir)
    state = _join_swiglu_halves(_read_tensors(layout.iter_dir))
    state = _unstack_layers(canonicalize(state), getattr(args, "num_layers", None))
    return state, args
