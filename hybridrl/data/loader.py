"""A resumable batch loader: deterministic per-epoch order from (seed, epoch), state = (epoch, batch_index, seed).

The state always points at the *next* batch, so a checkpoint taken after the last batch of an epoch
resumes at batch 0 of the next epoch (verl's epoch-boundary resume trained 0 steps, PR #5725).

With a user's sampler (`data.sampler`, `sampler_order.py`) the sampler orders the rows instead (data.shuffle and
the seed then have no effect, as in verl), its state is saved with the loader's under "sampler", and
`update_sampler(batch)` after each step feeds a curriculum sampler.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch

from hybridrl.data.errors import DatasetError
from hybridrl.data.sampler_order import IndexSampler, SamplerOrder
from hybridrl.utils.batch import Batch

logger = logging.getLogger("hybridrl.data")


class Rows(Protocol):
    """What the loader reads of a dataset: its length and its rows by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class StatefulLoader:
    """Batches `collate_fn(rows)` of `batch_size` rows; `for batch in loader` runs the rest of the current epoch."""

    def __init__(self, dataset: Rows, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = True, collate_fn: Callable[[list[Any]], Batch],
                 sampler: IndexSampler | None = None, size_key: str = "data.train_batch_size") -> None:
        """`sampler`: data.sampler's object, which then orders the rows. `size_key`: the config key that set
        `batch_size`, named in errors (data.gen_batch_size when it is set)."""
        if batch_size < 1:
            raise ValueError(f"{size_key}={batch_size} must be at least 1")
        self.order = SamplerOrder(sampler, len(dataset)) if sampler is not None else None
        if batch_size > len(dataset):
            raise DatasetError(f"{size_key}={batch_size} is larger than the dataset ({len(dataset)} rows); "
                               f"lower {size_key} or add data")
        if self.order is not None and batch_size > len(self.order):
            raise DatasetError(f"{size_key}={batch_size} is larger than one epoch of {self.order.label} "
                               f"({len(self.order)} indices); lower {size_key} or fix the sampler's len")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.size_key = size_key
        self.epoch = 0
        self.batch_index = 0
        self._order_cache: tuple[int, list[int]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        rows = len(self.order) if self.order is not None else len(self.dataset)
        if self.drop_last:
            return rows // self.batch_size
        return -(-rows // self.batch_size)

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
        if self.order is not None:
            last = self.batch_index == len(self) - 1
            indices = self.order.take(epoch, self.batch_size, partial_ok=last and not self.drop_last)
        else:
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

    def update_sampler(self, batch: Batch) -> None:
        """After a training step: a curriculum sampler's `update(batch)` with the step's full batch (verl calls it
        after the step's metrics); nothing without one."""
        if self.order is not None:
            self.order.update(batch)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"epoch": self.epoch, "batch_index": self.batch_index, "seed": self.seed}
        if self.order is not None:
            state["sampler"] = self.order.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly after the batch that was last taken when `state` was saved."""
        epoch, batch_index, seed = int(state["epoch"]), int(state["batch_index"]), int(state["seed"])
        if not 0 <= batch_index <= len(self):
            raise ValueError(f"loader state batch_index={batch_index} is outside 0..{len(self)} batches per epoch; "
                             f"the dataset or {self.size_key} changed since the checkpoint was saved")
        if seed != self.seed:
            logger.warning("resuming the data order of the checkpoint (seed %d), not data.seed=%d", seed, self.seed)
        # A state saved at an epoch's end by another writer (batch_index == len) means: start the next epoch.
        if batch_index == len(self):
            epoch, batch_index = epoch + 1, 0
        self.epoch, self.batch_index, self.seed = epoch, batch_index, seed
        self._order_cache = None
        if self.order is not None:
            self.order.load_state_dict(state.get("sampler"), batch_index * self.batch_size)
