"""`use_shm`: load a model (or a data file) from a copy in /dev/shm, verl's `copy_to_local(..., use_shm=True)`.

Every role and rank of a run loads the same checkpoint (actor, reference, rollout replicas); from a RAM-backed
tmpfs those reads cost memory bandwidth instead of disk or network-filesystem time.

Where: `<root>/hybridrl-cache/<hash of the source path>/<source's name>`, root = /dev/shm (or the directory
in HYBRIDRL_SHM_ROOT). One process copies, under a file lock, into a `.partial-<pid>` folder renamed into place
when complete, so concurrent ranks never read half a copy; the others wait and reuse it. A hub id
(`Qwen/Qwen2.5-0.5B-Instruct`) is resolved to its local snapshot first (downloaded if the cache lacks it).

Clean-up rules: a copy stays after the run, so the next run (and every later role or rank of this one) loads
it without copying again; it is replaced when the source changes (a different file list, size or modification
time); a partial copy left by a crashed process is removed by the next copier. /dev/shm is host memory: remove
`<root>/hybridrl-cache` to give it back (nothing in hybridrl deletes it while runs may share it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from hybridrl.logging.log import get_logger
from hybridrl.models.errors import ModelLoadError
from hybridrl.utils.collectives import is_rank0

ROOT_ENV = "HYBRIDRL_SHM_ROOT"
CACHE_DIR = "hybridrl-cache"
MANIFEST = "manifest.json"  # beside the copy: the source's listing it was made from
SKIPPED_DIRS = frozenset({".git"})  # version-control history is not part of a checkpoint
log = get_logger("hybridrl.models")

Listing = dict[str, list[int]]  # relative path -> [size, mtime_ns]


@dataclass(frozen=True)
class ShmCopy:
    """Where to load from, and what it took: bytes copied now (0 when an earlier copy was reused)."""

    path: str
    copied_bytes: int
    total_bytes: int


def shm_root() -> str:
    return os.environ.get(ROOT_ENV, "/dev/shm")


def copy_to_shm(source: str, *, use_shm_key: str, source_key: str) -> ShmCopy:
    """The /dev/shm copy of `source` (a directory or a file), made now or reused (see the module docstring).

    `use_shm_key` / `source_key` name the settings in errors, e.g. actor_rollout_ref.model.use_shm / .path."""
    src = _local_source(source, source_key)
    listing = _listing(src)
    total = sum(size for size, _ in listing.values())
    cache = os.path.join(shm_root(), CACHE_DIR)
    try:
        os.makedirs(cache, exist_ok=True)
    except OSError as error:
        raise ModelLoadError(f"{use_shm_key}=true: cannot create {cache} ({error}); set {ROOT_ENV} to a writable "
                             f"tmpfs directory or set {use_shm_key}=false") from error
    entry = os.path.join(cache, hashlib.sha1(src.encode()).hexdigest()[:16])
    copy = ShmCopy(os.path.join(entry, os.path.basename(src)), 0, total)
    with _locked(entry + ".lock"):
        if _manifest(entry) == {"source": src, "files": listing}:
            return copy
        shutil.rmtree(entry, ignore_errors=True)
        _remove_partials(cache, os.path.basename(entry))
        require_space(total, shutil.disk_usage(cache).free, src=src, cache=cache, use_shm_key=use_shm_key)
        _copy(src, entry, listing, cache=cache, use_shm_key=use_shm_key)
    return ShmCopy(copy.path, total, total)


def load_path(source: str, use_shm: bool, *, use_shm_key: str, source_key: str) -> str:
    """`source` itself, or with use_shm its /dev/shm copy (one info line on rank 0 says which and what it cost)."""
    if not use_shm:
        return source
    copy = copy_to_shm(source, use_shm_key=use_shm_key, source_key=source_key)
    if is_rank0():
        how = (f"copied {_gib(copy.copied_bytes)} from {source}" if copy.copied_bytes
               else f"reusing the copy of {source} made earlier")
        log.info(f"{use_shm_key}: loading from {copy.path} ({how}); the copy stays in host memory after the run: "
                 f"remove {os.path.join(shm_root(), CACHE_DIR)} to free it")
    return copy.path


def require_space(needed: int, free: int, *, src: str, cache: str, use_shm_key: str) -> None:
    """A ModelLoadError when the copy (`needed` bytes) does not fit in the tmpfs's `free` bytes."""
    if needed <= free:
        return
    root = os.path.dirname(cache)
    raise ModelLoadError(
        f"{use_shm_key}=true copies {src} ({_gib(needed)}) to {cache}, but {root} has {_gib(free)} free: free space "
        f"there (copies of earlier runs: rm -rf {cache}), enlarge it (docker run --shm-size=..., or mount -o "
        f"remount,size=<bytes> {root}), point {ROOT_ENV} at a larger tmpfs, or set {use_shm_key}=false")


# ----------------------------------------------------------------- pieces
def _local_source(source: str, key: str) -> str:
    path = os.path.abspath(os.path.expanduser(os.path.expandvars(source)))
    if os.path.exists(path):
        return path
    if source.count("/") == 1 and not source.startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(source)
        except Exception as error:  # noqa: BLE001 - any hub failure becomes one actionable error
            raise ModelLoadError(f"{key}={source!r} is not a local path and its hub snapshot could not be resolved "
                                 f"({type(error).__name__}: {error}); download it first or give a local "
                                 "directory") from error
    raise ModelLoadError(f"{key}={source!r}: no such file or directory")


def _listing(src: str) -> Listing:
    """Every file under `src` (or `src` itself) with its size and mtime; symlinks (HF cache blobs) followed."""
    if os.path.isfile(src):
        stat = os.stat(src)
        return {os.path.basename(src): [stat.st_size, stat.st_mtime_ns]}
    listing: Listing = {}
    base = os.path.basename(src)
    for folder, dirs, files in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            stat = os.stat(os.path.join(folder, name))
            listing[os.path.join(base, os.path.relpath(os.path.join(folder, name), src))] = [stat.st_size,
                                                                                           stat.st_mtime_ns]
    return listing


def _manifest(entry: str) -> dict | None:
    try:
        with open(os.path.join(entry, MANIFEST)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _copy(src: str, entry: str, listing: Listing, *, cache: str, use_shm_key: str) -> None:
    partial = f"{entry}.partial-{os.getpid()}"
    base_parent = os.path.dirname(src)
    try:
        for relative in listing:
            target = os.path.join(partial, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(base_parent, relative), target)
        with open(os.path.join(partial, MANIFEST), "w") as f:
            json.dump({"source": src, "files": listing}, f)
        os.rename(partial, entry)
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        free = shutil.disk_usage(cache).free
        raise ModelLoadError(f"{use_shm_key}=true: copying {src} to {cache} failed ({error}); {_gib(free)} free "
                             f"there now; free space (rm -rf {cache}) or set {use_shm_key}=false") from error


def _remove_partials(cache: str, entry_name: str) -> None:
    """Half copies of this entry left by processes that died while copying (the lock is ours now)."""
    for name in os.listdir(cache):
        if name.startswith(entry_name + ".partial-"):
            shutil.rmtree(os.path.join(cache, name), ignore_errors=True)


@contextmanager
def _locked(lock_file: str) -> Iterator[None]:
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / 2**30:.2f} GiB"
