"""Checkpoint files that cannot run code: tensors in safetensors, everything else in JSON.

A resume reads files a user points at (`trainer.resume_from_path`, a copied run folder), so nothing in a
checkpoint is unpickled. `save_tensors` / `load_tensors`: a flat `{name: tensor}` (model weights) in one
safetensors file; names that share one tensor (tied embeddings) are stored once and listed in the file's
metadata. `save_state` / `load_state`: any nesting of dicts (also with int keys), lists, tuples, numbers,
strings, None, tensors and numpy arrays (optimizer state, LR schedule, RNG states): the structure goes to
`<stem>.json`, each tensor replaced by a reference into `<stem>.safetensors`. `load_legacy_pt` reads the
`.pt` files of earlier hybridrl checkpoints with `torch.load(weights_only=True)` and an allow-list of the
numpy types their RNG state holds: a pickle that asks for anything else is refused, not run.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from hybridrl.checkpoint.errors import CheckpointError

ALIASES_KEY = "hybridrl.aliases"  # safetensors metadata: {"lm_head.weight": "model.embed_tokens.weight"}
_TAG = "__hybridrl__"  # marks an encoded value in the JSON structure


def save_tensors(path: str, tensors: dict[str, torch.Tensor]) -> None:
    """Write `tensors` (detached, on any device) as one safetensors file; shared tensors once."""
    stored, aliases = _dedupe(tensors)
    write_safetensors(path, stored, {ALIASES_KEY: json.dumps(aliases)} if aliases else None)


def load_tensors(path: str) -> dict[str, torch.Tensor]:
    """The `{name: tensor}` written by `save_tensors` (on CPU), aliases restored as the same tensor."""
    try:
        tensors, metadata = _read_safetensors(path)
        aliases = json.loads(metadata.get(ALIASES_KEY, "{}"))
    except Exception as err:  # OSError, JSON errors, safetensors' own SafetensorError (a plain Exception)
        raise CheckpointError(f"{path} is not a readable safetensors file ({type(err).__name__}: {err}); the "
                              f"checkpoint is damaged or was not written completely: resume from another "
                              f"global_step_N") from None
    for alias, name in aliases.items():
        tensors[alias] = tensors[name]
    return tensors


def _read_safetensors(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors in ordinary memory, not mapped from the file: an optimizer state restored from a mapping would
    keep the checkpoint's file (and its disk space) alive for the whole run, and truncating it would crash."""
    try:
        handle = safe_open(path, framework="pt", device="cpu", backend="pread")  # read into memory (newer safetensors)
        copy = False
    except TypeError:  # older safetensors: memory-mapped, so copied out
        handle, copy = safe_open(path, framework="pt", device="cpu"), True
    with handle as f:
        tensors = {name: f.get_tensor(name).clone() if copy else f.get_tensor(name) for name in f.keys()}
        return tensors, dict(f.metadata() or {})


def save_state(stem: str, state: Any) -> dict[str, torch.Tensor]:
    """Write `state` as `<stem>.json` (+ `<stem>.safetensors` when it holds tensors); returns the tensors by
    their reference name (for the manifest's checksums)."""
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(state, tensors, "")
    if tensors:
        write_safetensors(stem + ".safetensors", tensors)
    _write_json(stem + ".json", structure)
    return tensors


def load_state(stem: str) -> tuple[Any, dict[str, torch.Tensor]]:
    """What `save_state` wrote, and its tensors by reference name."""
    try:
        with open(stem + ".json") as f:
            structure = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{stem}.json cannot be read ({err}); the checkpoint is damaged: resume from another "
                              f"global_step_N") from None
    tensors = load_tensors(stem + ".safetensors") if os.path.exists(stem + ".safetensors") else {}
    return _decode(structure, tensors, stem), tensors


def _write_json(path: str, value: Any) -> None:
    with open(path, "w") as f:
        json.dump(value, f)


_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
           torch.complex64: "C64"}


def write_safetensors(path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """The safetensors format (8-byte header length, JSON header, raw little-endian bytes), written one tensor at
    a time: a state on the GPU is never copied to host memory whole (`safetensors.torch.save_file` takes a
    dict of host tensors), and host tensors are written without a copy. Read back by the safetensors library."""
    if sys.byteorder != "little":
        raise CheckpointError("checkpoints are written little-endian, as safetensors requires; this host is not")
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"tensor {name!r} has dtype {tensor.dtype}, which a checkpoint cannot store")
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    # A new file renamed over `path`: tensors read from `path` are memory-mapped, and truncating it under them
    # would crash the process (SIGBUS) instead of replacing it.
    with open(path + ".partial", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for tensor in tensors.values():
            host = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            f.write(memoryview(host.numpy()))
    os.replace(path + ".partial", path)


def _dedupe(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors that are one and the same view (tied weights) stored under their first name."""
    first: dict[tuple, str] = {}
    stored, aliases = {}, {}
    for name, tensor in tensors.items():
        view = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                tensor.stride(), tensor.dtype)
        if tensor.numel() and view in first:
            aliases[name] = first[view]
            continue
        first.setdefault(view, name)
        stored[name] = tensor
    return stored, aliases


def _encode(value: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = value
        return {_TAG: "tensor", "name": name}
    if isinstance(value, np.ndarray):
        return {_TAG: "ndarray", "dtype": value.dtype.str, "shape": list(value.shape), "data": value.ravel().tolist()}
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (list, tuple)):
        items = [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else {_TAG: "tuple", "items": items}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and _TAG not in value:
            return {k: _encode(v, tensors, f"{path}.{k}") for k, v in value.items()}
        return {_TAG: "dict", "items": [[_encode(k, tensors, path), _encode(v, tensors, f"{path}.{k}")]
                                        for k, v in value.items()]}
    raise TypeError(f"checkpoint state at {path or '<root>'} holds a {type(value).__name__}, which a checkpoint "
                    f"cannot store without pickling; convert it to numbers, strings, lists, dicts or tensors")


def _decode(value: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get(_TAG)
    if tag is None:
        return {k: _decode(v, tensors, where) for k, v in value.items()}
    if tag == "tensor":
        if value["name"] not in tensors:
            raise CheckpointError(f"{where}.json refers to tensor {value['name']!r}, missing from "
                                  f"{where}.safetensors; the checkpoint is damaged")
        return tensors[value["name"]]
    if tag == "ndarray":
        return np.asarray(value["data"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])
    if tag == "tuple":
        return tuple(_decode(v, tensors, where) for v in value["items"])
    if tag == "dict":
        return {_decode(k, tensors, where): _decode(v, tensors, where) for k, v in value["items"]}
    raise CheckpointError(f"{where}.json holds an unknown entry {tag!r}; it was written by a newer hybridrl")


# ---------------------------------------------------------------- checkpoints of earlier hybridrl versions
def _legacy_globals() -> list:
    """What the RNG state in an earlier `extra_state.pt` pickles (numpy's MT19937 state array); nothing else."""
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2 (numpy.core warns there)
    except ImportError:
        from numpy.core.multiarray import _reconstruct
    return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_legacy_pt(path: str) -> Any:
    """A `.pt` file of an earlier hybridrl checkpoint, unpickled with torch's weights-only loader."""
    try:
        with torch.serialization.safe_globals(_legacy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:
        raise CheckpointError(f"{path} cannot be read ({err})") from None
    except Exception as err:  # pickle.UnpicklingError / RuntimeError with torch's explanation
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"refused to load {path}: it holds Python objects a checkpoint never contains "
                              f"({first}); loading it could run code. A checkpoint written by hybridrl holds only "
                              f"tensors and plain values, so this file was altered or comes from elsewhere: resume "
                              f"from another global_step_N, or delete it") from None
