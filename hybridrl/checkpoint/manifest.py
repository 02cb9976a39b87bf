"""What a checkpoint says it holds, and the checks a resume makes against it.

Each role folder (`global_step_N/actor/`) has a `manifest.json`: the format version, the parts saved
(`save_contents`) and, per part, every tensor's shape, dtype and checksum. A resume checks the files it
read against it (a damaged or half-written file fails by name) and, after loading, checks the weights the
model now holds (a restore that did not take, e.g. weights still the initial ones, fails by name).

The checksum is the sum of the tensor's bytes read as 64-bit integers, modulo 2^64: one pass at memory
speed (about 4 GB/s on one CPU core), exact on any device (integer addition is associative, so neither
thread count nor device changes it), and any single changed element changes it. Not a cryptographic hash: it detects
damage and restores that did not take, not tampering (safe loading is `state_io`'s job).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from hybridrl.checkpoint.errors import CheckpointError

FORMAT = 2  # 1: torch.save pickles (model.pt, optim.pt, extra_state.pt, data.pt), read by state_io.load_legacy_pt
MANIFEST_FILE = "manifest.json"


def tensor_checksum(tensor: torch.Tensor) -> str:
    """Sum of the tensor's bytes read as 64-bit words (the last < 8 bytes one by one), modulo 2^64, as hex."""
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    whole = data.numel() // 8 * 8
    try:
        words = data[:whole].view(torch.int64)
    except RuntimeError:  # a view that does not start on an 8-byte boundary
        words = data[:whole].clone().view(torch.int64)
    total = int(words.sum()) + int(data[whole:].sum(dtype=torch.int64))  # int64 sums wrap: exact modulo 2^64
    return f"{total % 2**64:016x}"


def describe_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
    """{name: {shape, dtype, checksum}} for a manifest."""
    return {name: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "checksum": tensor_checksum(t)}
            for name, t in tensors.items()}


def write_manifest(role_dir: str, contents: list[str], tensors: dict[str, dict[str, Any]]) -> None:
    path = os.path.join(role_dir, MANIFEST_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump({"format": FORMAT, "contents": list(contents), "tensors": tensors}, f)
    os.replace(path + ".tmp", path)


def read_manifest(role_dir: str) -> dict[str, Any] | None:
    """The role folder's manifest, or None for a checkpoint of the earlier format (no manifest)."""
    path = os.path.join(role_dir, MANIFEST_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path} cannot be read ({err}); the checkpoint is damaged: resume from another "
                              f"global_step_N") from None
    if manifest.get("format", 0) > FORMAT:
        raise CheckpointError(f"{path} is format {manifest.get('format')}, newer than this hybridrl reads "
                              f"({FORMAT}); upgrade hybridrl to resume it")
    return manifest


def tensor_mismatches(expected: dict[str, dict[str, Any]], actual: dict[str, torch.Tensor]) -> list[str]:
    """What differs between a manifest's tensor list and `actual` (missing, extra, shape, dtype, values)."""
    found = describe_tensors(actual)
    problems = [f"{name} is missing" for name in expected if name not in found]
    problems += [f"{name} is not in the checkpoint" for name in found if name not in expected]
    for name, want in expected.items():
        got = found.get(name)
        if got is None:
            continue
        for field in ("shape", "dtype", "checksum"):
            if got[field] != want[field]:
                problems.append(f"{name}: {field} {got[field]} where {want[field]} was saved"
                                if field != "checksum" else f"{name}: values differ from the saved ones")
                break
    return problems


def verify_read(path: str, expected: dict[str, dict[str, Any]], actual: dict[str, torch.Tensor]) -> None:
    """The tensors read from `path` are the ones the manifest lists."""
    problems = tensor_mismatches(expected, actual)
    if problems:
        raise CheckpointError(f"{path} does not hold what its manifest lists ({_summary(problems, len(expected))}); "
                              f"the file is damaged or was replaced: resume from another global_step_N")


def verify_restored(role_dir: str, expected: dict[str, dict[str, Any]], restored: dict[str, torch.Tensor]) -> None:
    """The model's weights after a resume are bit-for-bit the saved ones."""
    problems = tensor_mismatches(expected, restored)
    if not problems:
        return
    dtype_hint = " The dtypes differ: was fsdp_config.model_dtype changed since the save? Set it back." \
        if any(": dtype" in p for p in problems) else ""
    raise CheckpointError(f"after resuming from {role_dir} the model does not hold the saved weights "
                          f"({_summary(problems, len(expected))}): training would continue from other weights than "
                          f"the checkpoint's (for instance the initial ones).{dtype_hint}")


def _summary(problems: list[str], total: int) -> str:
    shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
    return f"{len(problems)} of {total} tensors: {shown}"
