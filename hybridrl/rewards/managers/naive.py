"""verl's `naive` reward manager: the reward function on each row, in this process or, with
`reward_model.num_workers` > 1, in that many spawned processes (rewards/pool.py)."""

from __future__ import annotations

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.manager import ScoredBatch, score_batch
from hybridrl.rewards.managers.base import ManagerContext, RewardRows, check_kwargs, register
from hybridrl.rewards.pool import ScoringPool
from hybridrl.utils.batch import Batch


class RowScorer:
    """Row-by-row scoring shared by the naive and DAPO managers."""

    def __init__(self, context: ManagerContext) -> None:
        self.context = context
        self.pool = (ScoringPool(context.spec, context.num_workers, context.on_error)
                     if context.num_workers > 1 else None)

    def score_rows(self, rows: RewardRows, texts: list[str] | None = None) -> ScoredBatch:
        columns = (texts or rows.responses_text, rows.data_sources, rows.ground_truths, rows.extra_infos)
        if self.pool is not None:
            return self.pool.score(*columns)
        return score_batch(*columns, self.context.compute_score, on_error=self.context.on_error)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@register("naive")
class NaiveRewardManager(RowScorer):
    def __init__(self, context: ManagerContext, **reward_kwargs) -> None:
        if "compute_score_timeout" in reward_kwargs:
            raise ConfigError("reward_model.reward_kwargs.compute_score_timeout: the naive manager here has no per-row "
                              "time limit (verl's works only on its main thread); use reward_manager.name=prime "
                              "with reward_model.reward_kwargs.timeout=<seconds>, which scores rows in processes "
                              "and gives a row that runs too long 0")
        check_kwargs("naive", reward_kwargs, ())
        super().__init__(context)

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch:
        return self.score_rows(rows)
