"""Recognising Megatron-LM checkpoint directories and the layout they use.

Two on-disk layouts exist (Megatron-LM `megatron/training/checkpointing.py`):
- classic ("torch"): `latest_checkpointed_iteration.txt` names an iteration; `iter_NNNNNNN/` (or `release/`)
  holds one `mp_rank_XX[_YYY]/model_optim_rng.pt` per tensor-parallel rank XX and pipeline rank YYY;
- distributed ("torch_dist"): the iteration directory holds a torch.distributed.checkpoint store
  (`.metadata` + `__*.distcp`) with unsharded global tensors, plus `common.pt` (args) and `metadata.json`.
`model.path` may point at the top directory (with the tracker file) or straight at an iteration directory.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from hybridrl.models.errors import ModelLoadError

TRACKER = "latest_checkpointed_iteration.txt"
SHARD_FILE = "model_optim_rng.pt"
_RANK_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?$")
SUPPORTED = ("supported: the classic layout (iter_NNNNNNN/ or release/ with mp_rank_XX[_YYY]/model_optim_rng.pt, "
             "dense GPT with tensor and pipeline parallelism) and torch_dist distributed checkpoints "
             "(.metadata + __*.distcp)")


class MegatronCheckpointError(ModelLoadError):
    """A Megatron checkpoint that is missing pieces or uses a layout/architecture this loader does not handle."""


@dataclass
class MegatronLayout:
    """Where the shards of one Megatron checkpoint iteration are.

    `shards[(tp_rank, pp_rank)]` is the shard file (classic only); `iteration` is None for `release/`.
    """

    kind: str  # "classic" or "dist"
    iter_dir: str
    iteration: int | None
    tp_size: int = 1
    pp_size: int = 1
    shards: dict[tuple[int, int], str] = field(default_factory=dict)


def _is_iter_dir(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return ".metadata" in names or any(_RANK_DIR.match(n) for n in names)


def is_megatron_checkpoint(path: str) -> bool:
    """True when `path` looks like a Megatron checkpoint (top directory or iteration directory).

    Deliberately permissive: a broken Megatron directory should reach `detect_layout` and get an error
    naming what is missing, rather than fall through to the HF loader's less helpful one.
    """
    path = os.path.expanduser(path)
    if not os.path.isdir(path):
        return False
    if os.path.isfile(os.path.join(path, TRACKER)) or _is_iter_dir(path):
        return True
    names = os.listdir(path)
    if "config.json" in names:
        return False
    return any(n == "release" or re.match(r"^iter_\d{7}$", n) for n in names)


def _read_tracker(root: str) -> tuple[str, int | None]:
    """The iteration directory named by the tracker file, and its iteration (None for release)."""
    with open(os.path.join(root, TRACKER)) as f:
        text = f.read().strip()
    if text == "release":
        return os.path.join(root, "release"), None
    if not text.isdigit():
        raise MegatronCheckpointError(f"{os.path.join(root, TRACKER)} contains {text!r}; expected an iteration "
                                      "number or 'release'")
    return os.path.join(root, f"iter_{int(text):07d}"), int(text)


def _iteration_of(iter_dir: str) -> int | None:
    m = re.match(r"^iter_(\d+)$", os.path.basename(os.path.normpath(iter_dir)))
    return int(m.group(1)) if m else None


def _locate_iter_dir(path: str) -> tuple[str, int | None]:
    if _is_iter_dir(path):
        return path, _iteration_of(path)
    if os.path.isfile(os.path.join(path, TRACKER)):
        iter_dir, iteration = _read_tracker(path)
        if not os.path.isdir(iter_dir):
            raise MegatronCheckpointError(f"{TRACKER} in {path} names {os.path.basename(iter_dir)}/, which does "
                                          "not exist")
        return iter_dir, iteration
    found = sorted(n for n in os.listdir(path) if n == "release" or n.startswith("iter_"))
    if found:
        raise MegatronCheckpointError(
            f"{path} has {', '.join(found[:4])} but no {TRACKER}; point at one iteration directory "
            f"(e.g. {os.path.join(path, found[-1])}) or write the iteration number into {TRACKER}")
    raise MegatronCheckpointError(f"{path} is not a Megatron checkpoint: no {TRACKER}, iter_*/ or mp_rank_*/ "
                                  f"found; {SUPPORTED}")


def detect_layout(path: str) -> MegatronLayout:
    """Find the iteration to load and its layout; raise MegatronCheckpointError saying what is wrong."""
    path = os.path.expanduser(path)
    if not os.path.isdir(path):
        raise MegatronCheckpointError(f"{path} is not a directory")
    iter_dir, iteration = _locate_iter_dir(path)
    names = os.listdir(iter_dir)
    if ".metadata" in names:
        return _dist_layout(iter_dir, iteration, names)
    return _classic_layout(iter_dir, iteration, names)


def _dist_layout(iter_dir: str, iteration: int | None, names: list[str]) -> MegatronLayout:
    backend = "torch_dist"
    if "metadata.json" in names:
        with open(os.path.join(iter_dir, "metadata.json")) as f:
            backend = json.load(f).get("sharded_backend", backend)
    if backend != "torch_dist" or not any(n.endswith(".distcp") for n in names):
        raise MegatronCheckpointError(f"{iter_dir} is a distributed checkpoint with backend {backend!r} "
                                      f"and files {sorted(names)[:6]}; {SUPPORTED}")
    return MegatronLayout(kind="dist", iter_dir=iter_dir, iteration=iteration)


def _classic_layout(iter_dir: str, iteration: int | None, names: list[str]) -> MegatronLayout:
    ranks = {}
    for name in names:
        m = _RANK_DIR.match(name)
        if not m:
            continue
        if m.group(3) is not None:
            raise MegatronCheckpointError(f"{iter_dir} has {name}/ (expert-parallel rank suffix): MoE/expert "
                                          f"parallel checkpoints are not supported; {SUPPORTED}")
        ranks[(int(m.group(1)), int(m.group(2)) if m.group(2) else None)] = os.path.join(iter_dir, name, SHARD_FILE)
    if not ranks:
        raise MegatronCheckpointError(f"{iter_dir} has neither mp_rank_*/ shard directories nor a .metadata "
                                      f"file (found {sorted(names)[:6]}); {SUPPORTED}")
    if len({pp is None for _, pp in ranks}) > 1:
        raise MegatronCheckpointError(f"{iter_dir} mixes mp_rank_XX/ and mp_rank_XX_YYY/ directories "
                                      "(two pipeline-parallel sizes); keep one checkpoint per directory")
    shards = {(tp, pp or 0): f for (tp, pp), f in ranks.items()}
    tp_size = max(tp for tp, _ in shards) + 1
    pp_size = max(pp for _, pp in shards) + 1
    missing = [(t, p) for t in range(tp_size) for p in range(pp_size) if (t, p) not in shards]
    if missing:
        raise MegatronCheckpointError(f"{iter_dir}: shard directories for (tp, pp) ranks {missing} are missing "
                                      f"(tp size {tp_size}, pp size {pp_size} from the directory names)")
    absent = [f for f in shards.values() if not os.path.isfile(f)]
    if absent:
        raise MegatronCheckpointError(f"{iter_dir}: {len(absent)} shard directories lack {SHARD_FILE} "
                                      f"(e.g. {absent[0]})")
    return MegatronLayout(kind="classic", iter_dir=iter_dir, iteration=iteration, tp_size=tp_size,
                          pp_size=pp_size, shards=shards)
