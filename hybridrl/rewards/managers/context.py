"""From the run's config to a ManagerContext: which reward function, how worker processes load it, the
code sandbox's settings, and the manager's own arguments."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any, Callable

from hybridrl.rewards.managers.base import ManagerContext
from hybridrl.rewards.pool import ScoreFnSpec


@dataclass(frozen=True)
class BuiltinScoreFnSpec(ScoreFnSpec):
    """The built-in table with the sandbox settings (`kwargs`) bound, loadable in a fresh process."""

    def load(self) -> Callable:
        from hybridrl.rewards import default_compute_score

        return functools.partial(default_compute_score, **self.kwargs) if self.kwargs else default_compute_score


def sandbox_kwargs(reward_model: Any) -> dict[str, Any]:
    """verl binds the SandboxFusion url, its concurrency and memory limit into default_compute_score when a url
    is set; the memory limit also bounds hybridrl's local sandbox (verl's local runs have none)."""
    sandbox = getattr(reward_model, "sandbox_fusion", None)
    if sandbox is None:
        return {}
    kwargs: dict[str, Any] = {"memory_limit_mb": sandbox.memory_limit_mb}
    if sandbox.url:
        kwargs.update(sandbox_fusion_url=sandbox.url, concurrent_semaphore=sandbox.max_concurrent)
    return kwargs


def score_fn_spec(cfg: Any, offered_kwargs: dict | None = None) -> ScoreFnSpec:
    """`custom_reward_function.path/name` with its reward_kwargs (and `offered_kwargs` where it takes them) when
    set, else the built-in table."""
    custom = cfg.custom_reward_function
    if custom.path:
        return ScoreFnSpec(custom.path, custom.name or "compute_score", dict(custom.reward_kwargs or {}),
                           offered=dict(offered_kwargs or {}))
    return BuiltinScoreFnSpec(kwargs=sandbox_kwargs(cfg.reward_model))


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) else dict(value) if value else None


def manager_context(cfg: Any, tokenizer: Any, offered_kwargs: dict | None = None) -> ManagerContext:
    spec = score_fn_spec(cfg, offered_kwargs)
    reward_model = cfg.reward_model
    buffer = _plain(getattr(reward_model, "overlong_buffer", None))
    return ManagerContext(
        compute_score=spec.load(), spec=spec, custom_function=bool(cfg.custom_reward_function.path),
        on_error=reward_model.on_error, timeout_s=reward_model.reward_fn_timeout_s,
        num_workers=reward_model.num_workers, tokenizer=tokenizer,
        reward_fn_key=cfg.data.reward_fn_key, max_response_length=cfg.data.max_response_length,
        overlong_buffer=buffer if buffer and buffer.get("enable") else None,
        reward_kwargs=dict(reward_model.reward_kwargs or {}))
