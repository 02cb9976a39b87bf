"""The train order drawn from a user's sampler (`data.sampler`, verl's `AbstractSampler` /
`AbstractCurriculumSampler`), one batch at a time.

Indices are pulled lazily, `batch_size` per step, as torch's DataLoader does with `num_workers=0` (verl requires
that for curriculum samplers): a curriculum sampler's `update(batch)` after step N shapes what step N+1 draws.

Epochs: `set_epoch(epoch)` is called before each epoch's `iter(sampler)` when the sampler has it (PyTorch's
DistributedSampler convention), so a seeded sampler can vary its order per epoch.

Resume (the loader's state holds the sampler's): a sampler with `state_dict()` / `load_state_dict(state)` is
trusted to resume itself: after `load_state_dict`, `iter(sampler)` must continue the epoch where it stopped (its
state records its position, as torchdata's stateful samplers do). A sampler without them is fast-forwarded: the
epoch's iterator is opened again and the indices already taken are skipped, which resumes exactly when its order
depends only on its construction and the epoch. A curriculum sampler without state_dict restarts its curriculum
(a warning says so).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Iterator, Protocol

import numpy as np

from hybridrl.data.errors import DatasetError
from hybridrl.utils.batch import Batch

logger = logging.getLogger("hybridrl.data")


class IndexSampler(Protocol):
    """What the loader needs of a sampler: row indices and how many there are per epoch (torch's Sampler)."""

    def __iter__(self) -> Iterator[int]: ...

    def __len__(self) -> int: ...


class StepBatch:
    """A finished step's batch as a sampler's `update(batch)` reads it: verl's DataProto names (`.batch` tensors,
    `.non_tensor_batch` arrays, `.meta_info`) and hybridrl's (`batch["token_level_scores"]`, `.get`, `len`)."""

    def __init__(self, batch: Batch) -> None:
        self.data = batch
        self.batch, self.non_tensor_batch, self.meta_info = batch.tensors, batch.non_tensors, batch.meta

    def __len__(self) -> int:
        return len(self.data)

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


class SamplerOrder:
    def __init__(self, sampler: IndexSampler, num_rows: int) -> None:
        self.sampler = sampler
        self.num_rows = num_rows
        self.label = f"data.sampler {type(sampler).__name__}"
        self._iterator: Iterator[int] | None = None
        self._epoch: int | None = None
        self._skip = 0  # indices to pass over when the next epoch iterator opens (fast-forward after a resume)

    def __len__(self) -> int:
        """Indices per epoch (the sampler's len)."""
        size = len(self.sampler)
        if not isinstance(size, (int, np.integer)) or size < 0:
            raise DatasetError(f"{self.label}: __len__ returned {size!r}; it must count the indices of one epoch")
        return int(size)

    def take(self, epoch: int, count: int, *, partial_ok: bool) -> list[int]:
        """The next `count` indices of `epoch` (fewer only for the last batch when `partial_ok`)."""
        if self._iterator is None or self._epoch != epoch:
            self._open(epoch)
        assert self._iterator is not None
        indices = list(itertools.islice(self._iterator, count))
        if len(indices) < count and not partial_ok:
            raise DatasetError(f"{self.label} stopped after fewer indices than its __len__ ({len(self)}) promised in "
                               f"epoch {epoch}; make __iter__ yield len(self) indices")
        for index in indices:
            if not isinstance(index, (int, np.integer)) or not 0 <= index < self.num_rows:
                raise DatasetError(f"{self.label} yielded {index!r}, not a row index in 0..{self.num_rows - 1}")
        return [int(index) for index in indices]

    def _open(self, epoch: int) -> None:
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        self._iterator, self._epoch = iter(self.sampler), epoch
        if self._skip:
            skipped = sum(1 for _ in itertools.islice(self._iterator, self._skip))
            if skipped < self._skip:
                raise DatasetError(f"{self.label} yields {skipped} indices in epoch {epoch}, fewer than the "
                                   f"{self._skip} the checkpoint had taken; the sampler changed since it was saved")
            self._skip = 0

    def state_dict(self) -> Any:
        """The sampler's own state (None when it has no state_dict)."""
        state_dict = getattr(self.sampler, "state_dict", None)
        return state_dict() if callable(state_dict) else None

    def load_state_dict(self, state: Any, taken_in_epoch: int) -> None:
        """Resume: the sampler's state when it keeps one, else skip the `taken_in_epoch` indices (module docstring)."""
        load = getattr(self.sampler, "load_state_dict", None)
        if callable(load) and state is not None:
            load(state)
            self._skip = 0
        else:
            self._skip = taken_in_epoch
            if callable(getattr(self.sampler, "update", None)):
                logger.warning("%s has update() but no state_dict()/load_state_dict(): its curriculum is not in "
                               "the checkpoint and restarts from its initial state; add both methods to resume it "
                               "exactly", self.label)
        self._iterator, self._epoch = None, None

    def update(self, batch: Batch) -> None:
        """verl's `AbstractCurriculumSampler.update(batch)` after a step; nothing for a plain sampler."""
        update = getattr(self.sampler, "update", None)
        if callable(update):
            update(batch=StepBatch(batch))
