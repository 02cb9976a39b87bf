"""A resumable batch loader: deterministic per-epoch order from (seed, epoch), state = (epoch, batch_index, seed).

The state always points at the *next* batch, so a checkpoint taken after the last batch of an epoch
resumes at batch 0 of the next epoch (verl's epoch-boundary resume trained 0 steps, PR #5725).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch

from hybridrl.data.errors import DatasetError
from hybridrl.utils.batch import Batch

logger = logging.getLogger("hybridrl.data")


class Rows(Protocol):
    """What the loader reads of a dataset: its length and its rows by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class StatefulLoader:
    """Batches `collate_fn(rows)` of `batch_size` rows; `for batch in loader` runs the rest of the current epoch."""

    def __init__(self, dataset: Rows, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = True, collate_fn: Callable[[list[Any]], Batch]) -> None:
        if batch_size < 1:
            raise ValueError(f"data.train_batch_size={batch_size} must be at least 1")
        if batch_size > len(dataset):
            raise DatasetError(f"data.train_batch_size={batch_size} is larger than the dataset ({len(dataset)} rows); "
                             f"lower data.train_batch_size or add data")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.epoch = 0
        self.batch_index = 0
        self._order_cache: tuple[int, list[int]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        if self.drop_last:
            return len(self.dataset) // self.batch_size
        return -(-len(self.dataset) // self.batch_size)

    def epoch_order(self, epoch: int) -> list[int]:
        """The row order of `epoch`: a permutation seeded by (seed, epoch), or 0..N-1 without shuffle."""
        if not self.shuffle:
            return list(range(len(self.dataset)))
        if self._order_cache is None or self._order_cache[0] != epoch:
            # SeedSequence mixes (seed, epoch) so seed s+1 at epoch e differs from seed s at epoch e+1.
            epoch_seed = int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0])
            generator = torch.Generator().manual_seed(epoch_seed)
            self._order_cache = (epoch, torch.randperm(len(self.dataset), generator=generator).tolist())
        return self._order_cache[1]

    def next_batch(self) -> tuple[Batch, int]:
        """The next batch and the epoch it belongs to; rolls into the next epoch after the last batch."""
        epoch = self.epoch
        start = self.batch_index * self.batch_size
        indices = self.epoch_order(epoch)[start:start + self.batch_size]
        batch = self.collate_fn([self.dataset[i] for i in indices])
        self.batch_index += 1
        if self.batch_index >= len(self):
            self.epoch, self.batch_index = epoch + 1, 0
        return batch, epoch

    def __iter__(self) -> Iterator[Batch]:
        epoch = self.epoch
        while self.epoch == epoch:
            yield self.next_batch()[0]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch_index": self.batch_index, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue exactly after the batch that was last taken when `state` was saved."""
        epoch, batch_index, seed = int(state["epoch"]), int(state["batch_index"]), int(state["seed"])
        if not 0 <= batch_index <= len(self):
            raise ValueError(f"loader state batch_index={batch_index} is outside 0..{len(self)} batches per epoch; "
                             f"the dataset or data.train_batch_size changed since the checkpoint was saved")
        if seed != self.seed:
            logger.warning("resuming the data order of the checkpoint (seed %d), not data.seed=%d", seed, self.seed)
        # A state saved at an epoch's end by another writer (batch_index == len) means: start the next epoch.
        if batch_index == len(self):
            epoch, batch_index = epoch + 1, 0
        self.epoch, self.batch_index, self.seed = epoch, batch_index, seed
        self._order_cache = None
