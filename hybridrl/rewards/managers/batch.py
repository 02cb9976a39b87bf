"""verl's `batch` reward manager: one call of a batched reward function per batch,
fn(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_model.reward_kwargs) -> a list
with a float or a {"score": ...} dict per row (e.g. to score rows in parallel, or with one model call)."""

from __future__ import annotations

import logging

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.manager import RewardFunctionError, ScoredBatch, describe_error, function_name, rows_extra, \
    split_result
from hybridrl.rewards.managers.base import ManagerContext, RewardRows, register
from hybridrl.utils.batch import Batch

log = logging.getLogger(__name__)


@register("batch")
class BatchRewardManager:
    def __init__(self, context: ManagerContext, **reward_kwargs) -> None:
        if not context.custom_function:
            raise ConfigError("reward_manager.name=batch calls a batched reward function, and none is set: point "
                              "custom_reward_function.path/name at fn(data_sources, solution_strs, ground_truths, "
                              "extra_infos, **kwargs) returning one score per row, or use reward_manager.name=naive "
                              "for the built-in scorers")
        if context.num_workers > 1:
            log.info("reward_model.num_workers=%d: the batch manager makes one call per batch in the trainer's "
                     "process; parallelise inside the batched function", context.num_workers)
        self.context, self.reward_kwargs = context, reward_kwargs

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch:
        fn = self.context.compute_score
        try:
            results = fn(data_sources=rows.data_sources, solution_strs=rows.responses_text,
                         ground_truths=rows.ground_truths, extra_infos=rows.extra_infos, **self.reward_kwargs)
        except Exception as error:
            if self.context.on_error == "raise":
                raise RewardFunctionError(describe_error(fn, "<batch>", 0, error)) from error
            return ScoredBatch(scores=[0.0] * len(rows), num_errors=len(rows))
        results = list(results) if not isinstance(results, dict) else results
        if not isinstance(results, list) or len(results) != len(rows):
            raise RewardFunctionError(f"batched reward function {function_name(fn)} returned "
                                      f"{type(results).__name__} of {len(results) if hasattr(results, '__len__') else '?'}"
                                      f" items for {len(rows)} rows; it must return one score per row")
        pairs = [split_result(result, fn, rows.data_sources[i], i) for i, result in enumerate(results)]
        return ScoredBatch(scores=[score for score, _ in pairs], extra=rows_extra([extra for _, extra in pairs]))

    def close(self) -> None:
        pass
