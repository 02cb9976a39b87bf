"""Handing full model weights from one process to others on the same node through one shared-memory file.

The writer (the actor's rank 0, or the controller holding an in-process actor) writes each tensor, cast to
the rollout's dtype, into ONE flat file in /dev/shm (tmpfs: RAM pages that every process on the node can
map) as the tensors are gathered one at a time, and returns a small `WeightManifest` (path; per tensor its
name, dtype, shape and byte offset). Readers (rollout ranks) map the file read-only and load views of it.
Only the manifest travels through the launcher's pipes; no tensor payload is pickled.

The same file is rewritten in place every step (same layout, so its tmpfs pages are reused), and the
writer and every reader keep their mapping of it from step to step (`shm_mappings`). The controller
calls writer and readers one after the other, so a write never overlaps a read. When the file would
not fit (free space in /dev/shm less a reserve, or an explicit byte limit) the writer stops before
filling /dev/shm and hands back the weights as `PickledWeights` (tensors to pickle, the bytes that
were needed and why), which the caller logs and sends the old way. Either form of a handoff (`Payload`)
opens into (name, tensor) pairs the same way. Shared memory does not span nodes:
multi-node launchers (Ray) never use this module.

Lifetime: whoever creates the path removes it (`remove_buffer`) at shutdown and at interpreter exit;
a writer also removes it at its own exit (so a killed controller leaves nothing behind once its workers
exit), and `sweep_stale_buffers` removes files whose creating process is gone.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import uuid
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import ClassVar

import torch

from hybridrl.utils.processes import process_alive

from . import shm_mappings

SHM_DIR = "/dev/shm"
BUFFER_PREFIX = "hybridrl-weights-"
ALIGN_BYTES = 64  # each tensor starts on a cache line (also satisfies every dtype's alignment)
_MAX_WRITE_BYTES = 1 << 30  # one pwrite() call (Linux writes at most ~2 GiB per call)
_CLEANUP_REGISTERED: set[str] = set()  # paths this process removes at exit


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # torch dtype name without "torch.", e.g. "bfloat16"
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the buffer
    nbytes: int


@dataclass(frozen=True)
class WeightManifest:
    """Where each tensor of one handoff lies in the buffer at `path` (the first `nbytes` bytes)."""

    path: str
    nbytes: int
    entries: tuple[TensorEntry, ...]
    shared: ClassVar[bool] = True  # the tensors stay in shared memory; only this travels

    def open(self) -> Iterable[tuple[str, torch.Tensor]]:
        """Read-only views of the buffer (`map_weights`): copy them, do not keep them."""
        return map_weights(self).items()

    def to_dict(self) -> dict:
        return {"path": self.path, "nbytes": self.nbytes, "entries": [asdict(e) for e in self.entries]}

    @classmethod
    def from_dict(cls, data: dict) -> WeightManifest:
        entries = tuple(TensorEntry(e["name"], e["dtype"], tuple(e["shape"]), e["offset"], e["nbytes"])
                        for e in data["entries"])
        return cls(data["path"], data["nbytes"], entries)


@dataclass(frozen=True)
class BufferSpec:
    """What the controller asks a writer for: the file, the dtype to cast to, and the space it may use."""

    path: str
    dtype: torch.dtype | None  # None: keep each tensor's dtype
    max_bytes: int | None = None  # an explicit cap on the buffer (None: the free space of its filesystem)
    expected_bytes: int = 0  # what the last handoff needed; known too big -> spill without writing


@dataclass
class PickledWeights:
    """The weights as plain CPU tensors, sent pickled: with Ray, or spilled because the buffer could not hold
    them (`reason` says why, `needed_bytes` how much it would have taken)."""

    tensors: dict[str, torch.Tensor]
    needed_bytes: int = 0
    reason: str | None = None
    shared: ClassVar[bool] = False

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def open(self) -> Iterable[tuple[str, torch.Tensor]]:
        shm_mappings.forget_reads()  # a buffer mapped before was removed (spilled): let it go
        return self.tensors.items()


Payload = WeightManifest | PickledWeights  # one handoff, as the controller passes it to every rollout rank


# ---------------------------------------------------------------- paths and cleanup
def default_buffer_dir() -> str | None:
    """/dev/shm when this node has a writable one, else None (no shared-memory handoff possible)."""
    return SHM_DIR if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK) else None


def new_buffer_path(directory: str) -> str:
    """A fresh path naming the creating process (and its pid namespace: containers sharing /dev/shm number
    processes apart), so `sweep_stale_buffers` can tell when it is gone."""
    return os.path.join(directory, f"{BUFFER_PREFIX}{_pid_namespace()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def _pid_namespace() -> int:
    try:
        return int(re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")))
    except (OSError, ValueError):
        return 0


def remove_buffer(path: str) -> None:
    shm_mappings.forget(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_at_exit(path: str) -> None:
    """Remove `path` when this interpreter exits (once per path)."""
    if path not in _CLEANUP_REGISTERED:
        _CLEANUP_REGISTERED.add(path)
        atexit.register(remove_buffer, path)


def sweep_stale_buffers(directory: str) -> list[str]:
    """Remove buffers left by processes of this pid namespace that no longer exist (e.g. a SIGKILLed run);
    returns their paths."""
    removed = []
    for path in glob.glob(os.path.join(directory, f"{BUFFER_PREFIX}*")):
        match = re.match(rf"{BUFFER_PREFIX}(\d+)-(\d+)-", os.path.basename(path))
        if match and int(match.group(1)) == _pid_namespace() and not process_alive(int(match.group(2))):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:  # another user's file, or already removed: not ours to worry about
                pass
    return removed


def available_bytes(path: str, max_bytes: int | None) -> int:
    """Bytes the buffer at `path` may grow to: its size now plus the free space of its filesystem less a
    reserve (NCCL and others keep small files in /dev/shm: never fill it), capped by `max_bytes`."""
    stats = os.statvfs(os.path.dirname(path))
    total, free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    reserve = min(256 << 20, total // 16)
    current = os.path.getsize(path) if os.path.exists(path) else 0
    room = max(0, current + free - reserve)
    return room if max_bytes is None else min(room, max_bytes)


# ---------------------------------------------------------------- writing
def write_weights(named_tensors: Iterable[tuple[str, torch.Tensor]], spec: BufferSpec) -> Payload:
    """Cast and write the (name, tensor) pairs one at a time into the buffer; consumes the iterable fully
    (it may be a collective gather that every rank must finish) even when the buffer turns out too small."""
    room = available_bytes(spec.path, spec.max_bytes)
    tensors = iter(named_tensors)
    if spec.expected_bytes > room:  # known too big from the last handoff: do not write half of it again
        return _spill(tensors, spec, {}, room)
    remove_at_exit(spec.path)
    fd = os.open(spec.path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        return _write_all(fd, tensors, spec, room)
    finally:
        os.close(fd)


def _write_all(fd: int, tensors: Iterator[tuple[str, torch.Tensor]], spec: BufferSpec,
               room: int) -> Payload:
    kept = shm_mappings.kept_for_writing(spec.path, fd)
    entries: list[TensorEntry] = []
    written = _Written()
    end = 0
    for name, tensor in tensors:
        alias = written.alias_of(tensor)
        if alias is not None:  # a tied weight (e.g. lm_head = embed_tokens in a state dict): written once
            entries.append(replace(alias, name=name))
            continue
        entry = _entry_for(name, tensor, spec.dtype, _align(end))
        fits = entry.offset + entry.nbytes <= room
        error = _write_one(fd, tensor, entry, spec.dtype, kept, len(entries)) if fits else None
        if not fits or error is not None:
            done = {k: v.clone() for k, v in map_weights(WeightManifest(spec.path, end, tuple(entries))).items()}
            current = cast_to_cpu(tensor, spec.dtype, copy=True)
            return _spill(tensors, spec, {**done, name: current}, room, entry.offset + entry.nbytes, error)
        entries.append(entry)
        written.add(tensor, entry)
        end = entry.offset + entry.nbytes
    if os.fstat(fd).st_size != end:  # the layout shrank (e.g. LoRA deltas after a first full sync) or
        os.ftruncate(fd, end)  # ends in empty tensors
    shm_mappings.keep_for_writing(spec.path, fd, tuple(entries))
    return WeightManifest(spec.path, end, tuple(entries))


def _entry_for(name: str, tensor: torch.Tensor, dtype: torch.dtype | None, offset: int) -> TensorEntry:
    """Where `tensor`, cast as `cast_to_cpu` casts it, goes."""
    out = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
    return TensorEntry(name, _dtype_name(out), tuple(tensor.shape), offset, tensor.numel() * out.itemsize)


def _write_one(fd: int, tensor: torch.Tensor, entry: TensorEntry, dtype: torch.dtype | None,
               kept: shm_mappings.Mapping | None, index: int) -> OSError | None:
    """Write one tensor: into the kept mapping when the last handoff put the same tensor at the same place
    (the cast fused into the copy: no temporary, no page faults), else with pwrite (growing the file; a
    full /dev/shm is an error here, never a SIGBUS). Returns the write error, if any."""
    if entry.nbytes == 0:
        return None
    if kept is not None and index < len(kept.entries) and kept.entries[index] == entry:
        _view(kept.flat, entry).copy_(tensor.detach())
        return None
    try:
        _pwrite_all(fd, _as_bytes(cast_to_cpu(tensor, dtype)), entry.offset)
    except OSError as err:  # e.g. ENOSPC: another process filled /dev/shm meanwhile
        return err
    return None


class _Written:
    """Source tensors already written, to spot a second name for the same memory. Only a source that is
    still alive counts (weak references): a gathered tensor freed meanwhile may leave its address to the
    next one, which is a different weight."""

    def __init__(self) -> None:
        self._by_view: dict[tuple, tuple[weakref.ref, TensorEntry]] = {}

    @staticmethod
    def _view(tensor: torch.Tensor) -> tuple:
        return tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride()

    def add(self, tensor: torch.Tensor, entry: TensorEntry) -> None:
        if tensor.numel():
            self._by_view[self._view(tensor)] = (weakref.ref(tensor), entry)

    def alias_of(self, tensor: torch.Tensor) -> TensorEntry | None:
        seen = self._by_view.get(self._view(tensor)) if tensor.numel() else None
        return seen[1] if seen is not None and seen[0]() is not None else None


def _spill(rest: Iterator[tuple[str, torch.Tensor]], spec: BufferSpec, tensors: dict[str, torch.Tensor],
           room: int, needed: int = 0, error: OSError | None = None) -> PickledWeights:
    """The remaining tensors as CPU copies; the partial buffer is removed (it would only hold RAM)."""
    remove_buffer(spec.path)
    for name, tensor in rest:
        tensors[name] = cast_to_cpu(tensor, spec.dtype, copy=True)
        needed = _align(needed) + tensors[name].nbytes
    where = os.path.dirname(spec.path)
    if error is not None:
        reason = f"writing the weight buffer in {where} failed ({error}); they need {_gib(needed)}"
    else:
        cap = f", capped by a limit of {_gib(spec.max_bytes)}" if spec.max_bytes is not None else ""
        reason = (f"the weights need {_gib(needed)} of shared memory but only {_gib(room)} are available in "
                  f"{where}{cap}")
    return PickledWeights(tensors, needed, reason)


def cast_to_cpu(tensor: torch.Tensor, dtype: torch.dtype | None, *, copy: bool = False) -> torch.Tensor:
    """Cast floating-point tensors where they live (on a GPU: half the bytes cross PCIe; integer buffers keep
    their dtype), then to contiguous CPU memory; `copy`: never the caller's own storage (a tensor kept past
    the next optimizer step)."""
    tensor = tensor.detach()
    if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
        tensor, copy = tensor.to(dtype), False
    if tensor.device.type != "cpu":
        tensor, copy = tensor.to("cpu"), False
    return tensor.clone(memory_format=torch.contiguous_format) if copy else tensor.contiguous()


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:done + _MAX_WRITE_BYTES], offset + done)


def _align(offset: int) -> int:
    return -(-offset // ALIGN_BYTES) * ALIGN_BYTES


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _gib(num_bytes: int | None) -> str:
    """Readable size: GiB for model-sized buffers, down to bytes for test-sized ones."""
    value = float(num_bytes or 0)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.2f} GiB"


# ---------------------------------------------------------------- reading
def map_weights(manifest: WeightManifest) -> dict[str, torch.Tensor]:
    """Read-only tensor views of the buffer (`shm_mappings.read_only`), valid until the next handoff rewrites it:
    copy them, do not keep them."""
    try:
        flat = shm_mappings.read_only(manifest.path)
    except FileNotFoundError:
        raise FileNotFoundError(f"weight buffer {manifest.path} does not exist: it was removed (the trainer shut "
                                f"down?) or this process is on another node, which shared memory does not reach "
                                f"(multi-node runs hand weights over pickled, through Ray)") from None
    if len(flat) < manifest.nbytes:
        raise RuntimeError(f"weight buffer {manifest.path} holds {len(flat)} bytes but its manifest describes "
                           f"{manifest.nbytes}: it was rewritten while being read; hand the weights over again")
    return {e.name: _view(flat, e) for e in manifest.entries}


def _view(flat: torch.Tensor, entry: TensorEntry) -> torch.Tensor:
    return flat[entry.offset:entry.offset + entry.nbytes].view(getattr(torch, entry.dtype)).view(entry.shape)
