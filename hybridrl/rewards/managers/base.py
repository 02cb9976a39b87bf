"""What every reward manager gets (ManagerContext), reads (RewardRows) and is (RewardManager), and the
registry that `reward_manager.name` looks managers up in (verl's `register` / `get_reward_manager_cls`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.manager import ScoredBatch
from hybridrl.rewards.pool import ScoreFnSpec
from hybridrl.utils.batch import Batch


@dataclass(frozen=True)
class RewardRows:
    """The decoded batch a manager scores, one entry per row."""

    responses_text: list[str]
    data_sources: list[str]
    ground_truths: list[Any]
    extra_infos: list[dict | None]
    response_lengths: list[int]  # valid response tokens

    def __len__(self) -> int:
        return len(self.responses_text)


@dataclass(frozen=True)
class ManagerContext:
    """The settings a manager is built from (verl passes them as constructor arguments)."""

    compute_score: Callable  # the loaded reward function (custom, or the built-in table)
    spec: ScoreFnSpec  # how a worker process loads the same function
    custom_function: bool  # custom_reward_function.path is set
    on_error: str = "raise"
    num_workers: int = 1
    tokenizer: Any = None
    reward_fn_key: str = "data_source"
    max_response_length: int | None = None  # data.max_response_length
    overlong_buffer: dict | None = None  # reward_model.overlong_buffer (verl's DAPO recipe spelling)
    reward_kwargs: dict = field(default_factory=dict)  # reward_model.reward_kwargs: the manager's own arguments


class RewardManager(Protocol):
    """Turns a rollout batch into per-row scores (or token-level scores), extra info and metrics."""

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch: ...

    def close(self) -> None: ...


REWARD_MANAGERS: dict[str, Callable[..., RewardManager]] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: `reward_manager.name=<name>` builds this class as cls(context, **reward_kwargs)."""

    def decorator(cls: type) -> type:
        if REWARD_MANAGERS.get(name, cls) is not cls:
            raise ValueError(f"reward manager {name!r} is already registered as {REWARD_MANAGERS[name].__qualname__}")
        REWARD_MANAGERS[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> Callable[..., RewardManager]:
    if name not in REWARD_MANAGERS:
        raise ConfigError(f"reward_manager.name={name!r} is not a reward manager; registered ones: "
                          f"{sorted(REWARD_MANAGERS)}. For your own class set reward_manager.source=importlib, "
                          f"reward_manager.module.path=<file> and reward_manager.name=<class>")
    return REWARD_MANAGERS[name]


def check_kwargs(manager: str, given: dict, accepted: tuple[str, ...]) -> None:
    """ConfigError for reward_model.reward_kwargs keys `manager` does not take (verl: a TypeError)."""
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ConfigError(f"reward_model.reward_kwargs has {unknown}, which the {manager} reward manager does not "
                          f"take (it takes: {list(accepted) or 'nothing'}). Arguments of the reward function belong "
                          f"in custom_reward_function.reward_kwargs")


def bind_sandbox(compute_score: Callable, sandbox: dict) -> Callable:
    """The built-in table with the code sandbox's settings bound (verl's partial of default_compute_score)."""
    return functools.partial(compute_score, **sandbox) if sandbox else compute_score
