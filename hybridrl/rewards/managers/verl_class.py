"""`reward_manager.source=importlib`: a reward-manager class from `reward_manager.module.path`, named by
`reward_manager.name` (as in verl). Two kinds of class work:

- hybridrl's: cls(context, **reward_kwargs), called as manager(batch, rows) -> ScoredBatch.
- verl's `AbstractRewardManager` kind: cls(tokenizer=, num_examine=, compute_score=, reward_fn_key=,
  **reward_kwargs), called as manager(data, return_dict=True) with `data` a DataProto-like view (`.batch`
  tensors, `.non_tensor_batch` arrays, `.meta_info`, `len()`, `data[i]`) and returning a (B, R) reward
  tensor or {"reward_tensor", "reward_extra_info"}. Such a file must not import verl itself.
verl's newer reward-loop classes (async `run_single`) are refused with that explanation.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import torch

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.custom import import_python_file
from hybridrl.rewards.manager import ScoredBatch
from hybridrl.rewards.managers.base import ManagerContext, RewardRows
from hybridrl.utils.batch import Batch


@dataclass
class DataItem:
    """One row, as verl's DataProtoItem: `.batch[key]` a row tensor, `.non_tensor_batch[key]` a row object."""

    batch: dict[str, torch.Tensor]
    non_tensor_batch: dict[str, Any]
    meta_info: dict[str, Any] = field(default_factory=dict)


class DataView:
    """What verl's reward managers read from a DataProto, over a hybridrl Batch (no copies)."""

    def __init__(self, batch: Batch) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch.tensors, batch.non_tensors, batch.meta
        self._length = len(batch)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> DataItem:
        return DataItem({k: v[index] for k, v in self.batch.items()},
                        {k: v[index] for k, v in self.non_tensor_batch.items()}, self.meta_info)

    def __iter__(self):
        return (self[index] for index in range(self._length))


def load_manager_class(path: str | None, name: str):
    if not path:
        raise ConfigError("reward_manager.source=importlib needs reward_manager.module.path=<file defining the "
                          f"class {name!r}>")
    try:
        module = import_python_file(_existing(path))
    except ImportError as error:
        hint = " It imports verl, which hybridrl does not need: drop those imports (the DataProto it receives is " \
               "hybridrl's view)." if "verl" in str(error) else ""
        raise ConfigError(f"reward_manager.module.path={path!r} could not be imported: {error}.{hint}") from error
    cls = getattr(module, name, None)
    if not inspect.isclass(cls):
        found = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
        raise ConfigError(f"reward_manager.name={name!r}: {path} defines no class {name!r}; classes there: "
                          f"{found or 'none'}")
    if hasattr(cls, "run_single"):
        raise ConfigError(f"reward_manager.name={name!r} is a verl reward-loop manager (async run_single), which "
                          "hybridrl does not run; give the class __call__(data, return_dict=False) returning the "
                          "reward tensor (verl's AbstractRewardManager interface)")
    return cls


def _existing(path: str) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"reward_manager.module.path={path!r} is not a file")
    return file


class VerlClassManager:
    """A verl-style class behind hybridrl's manager interface."""

    def __init__(self, cls, context: ManagerContext, **reward_kwargs) -> None:
        self.manager = cls(tokenizer=context.tokenizer, num_examine=0, compute_score=context.compute_score,
                           reward_fn_key=context.reward_fn_key, **reward_kwargs)

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch:
        output = self.manager(DataView(batch), return_dict=True)
        tensor = output["reward_tensor"] if isinstance(output, dict) else output
        extra = {key: list(values) for key, values in (output.get("reward_extra_info") or {}).items()} \
            if isinstance(output, dict) else {}
        if not isinstance(tensor, torch.Tensor) or tensor.shape != batch["responses"].shape:
            raise ConfigError(f"reward manager {type(self.manager).__qualname__} returned "
                              f"{getattr(tensor, 'shape', type(tensor).__name__)}; it must return a reward tensor "
                              f"shaped like responses {tuple(batch['responses'].shape)}")
        tensor = tensor.float().cpu()
        return ScoredBatch(scores=tensor.sum(-1).tolist(), extra=extra, token_level_scores=tensor)

    def close(self) -> None:
        pass


def build_class_manager(path: str | None, name: str, context: ManagerContext, reward_kwargs: dict):
    cls = load_manager_class(path, name)
    parameters = inspect.signature(cls).parameters
    if "context" in parameters:
        return cls(context, **reward_kwargs)
    return VerlClassManager(cls, context, **reward_kwargs)
