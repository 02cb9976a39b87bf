"""verl's `naive` reward manager: the reward function on each row, in this process or, with
`reward_model.num_workers` > 1, in that many spawned processes (rewards/pool.py). Every call is bounded by
`reward_model.reward_fn_timeout_s` (rewards/watchdog.py)."""

from __future__ import annotations

import math

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.async_rows import is_async_function, score_batch_async
from hybridrl.rewards.manager import ScoredBatch, score_batch
from hybridrl.rewards.managers.base import ManagerContext, RewardRows, check_kwargs, register
from hybridrl.rewards.pool import ScoringPool
from hybridrl.utils.batch import Batch


class RowScorer:
    """Row-by-row scoring shared by the naive and DAPO managers.

    `compute_score_timeout` (verl's naive manager): a per-call limit whose timed-out rows score 0 whatever
    `reward_model.on_error` says (verl's rule); it replaces `reward_model.reward_fn_timeout_s` for this manager."""

    def __init__(self, context: ManagerContext, compute_score_timeout: float | None = None) -> None:
        self.context = context
        self.timeout_s = context.timeout_s if compute_score_timeout is None else float(compute_score_timeout)
        self.on_timeout = None if compute_score_timeout is None else "zero"  # None: as on_error
        self.pool = (ScoringPool(context.spec, context.num_workers, context.on_error, self.timeout_s,
                                 on_timeout=self.on_timeout) if context.num_workers > 1 else None)

    def score_rows(self, rows: RewardRows, texts: list[str] | None = None) -> ScoredBatch:
        columns = (texts or rows.responses_text, rows.data_sources, rows.ground_truths, rows.extra_infos)
        if self.pool is not None:
            return self.pool.score(*columns)
        if is_async_function(self.context.compute_score):  # every row in flight at once (a served GenRM batches them)
            return score_batch_async(*columns, self.context.compute_score, on_error=self.context.on_error,
                                     timeout_s=self.timeout_s, on_timeout=self.on_timeout)
        return score_batch(*columns, self.context.compute_score, on_error=self.context.on_error,
                           timeout_s=self.timeout_s, on_timeout=self.on_timeout)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@register("naive")
class NaiveRewardManager(RowScorer):
    def __init__(self, context: ManagerContext, compute_score_timeout: float | None = None,
                 **reward_kwargs) -> None:
        check_kwargs("naive", reward_kwargs, ("compute_score_timeout",))
        if compute_score_timeout is not None and not (isinstance(compute_score_timeout, (int, float))
                                                      and 0 < compute_score_timeout < math.inf):
            raise ConfigError(f"reward_model.reward_kwargs.compute_score_timeout={compute_score_timeout!r} must be a "
                              "finite number of seconds > 0 (verl's per-row limit of the naive manager), or left out "
                              "to use reward_model.reward_fn_timeout_s")
        super().__init__(context, compute_score_timeout)

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch:
        return self.score_rows(rows)
