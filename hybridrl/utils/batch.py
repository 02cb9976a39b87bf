"""The one batch type passed between the controller and the workers (verl's DataProto, simplified).

A `Batch` holds tensors that share a leading dimension (`tensors`), per-row Python objects stored as
numpy object arrays (`non_tensors`: `uid`, `data_source`, `reward_model`, `extra_info`, ...) and a
free-form `meta` dict (temperature, metrics, ...). Key names follow verl so users' code ports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch


def _as_object_array(values: Iterable[Any]) -> np.ndarray:
    values = list(values)
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    non_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.non_tensors = {k: v if isinstance(v, np.ndarray) and v.dtype == object else _as_object_array(v)
                            for k, v in self.non_tensors.items()}
        sizes = {k: v.shape[0] for k, v in self.tensors.items()}
        sizes.update({k: len(v) for k, v in self.non_tensors.items()})
        if len(set(sizes.values())) > 1:
            raise ValueError(f"Batch fields disagree on the number of rows: {sizes}")

    # ----------------------------------------------------------------- basics
    def __len__(self) -> int:
        for value in self.tensors.values():
            return value.shape[0]
        for value in self.non_tensors.values():
            return len(value)
        return 0

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        if key in self.non_tensors:
            return self.non_tensors[key]
        raise KeyError(f"batch has no field {key!r}; it has {sorted(self.tensors) + sorted(self.non_tensors)}")

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self.non_tensors.pop(key, None)
            self.tensors[key] = value
        else:
            self.tensors.pop(key, None)
            self.non_tensors[key] = value if isinstance(value, np.ndarray) and value.dtype == object \
                else _as_object_array(value)
        if len(self) and self._len_of(key) != len(self):
            raise ValueError(f"field {key!r} has {self._len_of(key)} rows, batch has {len(self)}")

    def _len_of(self, key: str) -> int:
        return self.tensors[key].shape[0] if key in self.tensors else len(self.non_tensors[key])

    def pop(self, key: str) -> Any:
        return self.tensors.pop(key) if key in self.tensors else self.non_tensors.pop(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    # ------------------------------------------------------------- selection
    def index(self, idx: torch.Tensor | np.ndarray | Sequence[int] | slice) -> "Batch":
        """Rows `idx` (a slice, a list of ints, or an int/bool tensor) as a new batch; meta is shared."""
        if isinstance(idx, slice):
            np_idx = np.arange(len(self))[idx]
        else:
            np_idx = np.asarray(idx.cpu() if isinstance(idx, torch.Tensor) else idx)
            if np_idx.dtype == bool:
                np_idx = np.nonzero(np_idx)[0]
        t_idx = torch.as_tensor(np_idx, dtype=torch.long)
        return Batch(
            tensors={k: v[t_idx.to(v.device)] for k, v in self.tensors.items()},
            non_tensors={k: v[np_idx] for k, v in self.non_tensors.items()},
            meta=dict(self.meta),
        )

    def select(self, keys: Iterable[str], meta: bool = True) -> "Batch":
        keys = list(keys)
        missing = [k for k in keys if k not in self]
        if missing:
            raise KeyError(f"batch has no field(s) {missing}")
        return Batch(
            tensors={k: self.tensors[k] for k in keys if k in self.tensors},
            non_tensors={k: self.non_tensors[k] for k in keys if k in self.non_tensors},
            meta=dict(self.meta) if meta else {},
        )

    def union(self, other: "Batch") -> "Batch":
        """Fields of both batches (same rows); `other` wins on key clashes, meta merged."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"cannot union batches of {len(self)} and {len(other)} rows")
        return Batch(
            tensors={**self.tensors, **other.tensors},
            non_tensors={**self.non_tensors, **other.non_tensors},
            meta={**self.meta, **other.meta},
        )

    def repeat(self, times: int, interleave: bool = True) -> "Batch":
        """Repeat rows: interleave → a,a,b,b (verl's default); otherwise a,b,a,b."""
        n = len(self)
        order = np.repeat(np.arange(n), times) if interleave else np.tile(np.arange(n), times)
        return self.index(order)

    def chunk(self, num_chunks: int) -> list["Batch"]:
        """Split into `num_chunks` contiguous parts of equal size (the size must divide). The parts are views of
        this batch's rows, not copies (shards on their way to ranks are serialized right away): writing into a
        part's tensors writes into this batch."""
        n = len(self)
        if num_chunks <= 0 or n % num_chunks:
            raise ValueError(f"cannot split {n} rows into {num_chunks} equal chunks")
        size = n // num_chunks
        return [self._row_views(i * size, (i + 1) * size) for i in range(num_chunks)]

    def _row_views(self, start: int, stop: int) -> "Batch":
        return Batch(tensors={k: v[start:stop] for k, v in self.tensors.items()},
                     non_tensors={k: v[start:stop] for k, v in self.non_tensors.items()}, meta=dict(self.meta))

    def split(self, size: int) -> list["Batch"]:
        """Contiguous parts of at most `size` rows."""
        return [self.index(slice(i, i + size)) for i in range(0, len(self), size)]

    @staticmethod
    def concat(batches: Sequence["Batch"]) -> "Batch":
        if not batches:
            raise ValueError("concat needs at least one batch")
        first = batches[0]
        meta: dict[str, Any] = {}
        for b in batches:
            meta.update(b.meta)
        return Batch(
            tensors={k: torch.cat([b.tensors[k] for b in batches]) for k in first.tensors},
            non_tensors={k: np.concatenate([b.non_tensors[k] for b in batches]) for k in first.non_tensors},
            meta=meta,
        )

    def to(self, device: torch.device | str) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, dict(self.non_tensors), dict(self.meta))

    def pad_to_multiple(self, divisor: int) -> tuple["Batch", int]:
        """Append copies of the first rows so len is a multiple of `divisor`; returns (batch, num_padded)."""
        pad = (-len(self)) % divisor
        if pad == 0:
            return self, 0
        order = np.concatenate([np.arange(len(self)), np.arange(pad) % len(self)])
        return self.index(order), pad

    def unpad(self, num_padded: int) -> "Batch":
        return self if num_padded == 0 else self.index(slice(0, len(self) - num_padded))
