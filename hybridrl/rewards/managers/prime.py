"""verl's `prime` reward manager (PRIME-RL): every row scored in parallel worker processes, each with a
time limit (verl: 300 s); a row that runs past it scores 0. Code and sympy-heavy math checks can hang on
adversarial responses; here they cannot stall the batch.

Processes: `reward_model.num_workers` when above 1, else one per core (verl: always 64). A timed-out
row leaves its worker busy, so the pool is killed and rebuilt before the next batch. A function that
raises follows `reward_model.on_error` (verl scores it 0 silently); timeouts are counted in
reward/num_timeouts and logged. Hybridrl's `reward_kwargs`: `timeout` (seconds), `num_processes`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

from hybridrl.rewards.async_rows import blocking
from hybridrl.rewards.manager import RewardFunctionError, ScoredBatch, describe_error, rows_extra, split_result
from hybridrl.rewards.managers.base import ManagerContext, RewardRows, check_kwargs, register
from hybridrl.rewards.pool import ScoreFnSpec
from hybridrl.utils.batch import Batch

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_SECONDS = 300.0

_score_fn: Callable | None = None  # in a worker process


def _load(spec: ScoreFnSpec) -> None:
    global _score_fn
    _score_fn = blocking(spec.load())  # an async function runs each call to its end in this worker


def _ready() -> int:
    time.sleep(0.1)  # long enough for the warm-up tasks to land on different workers
    return os.getpid()


def _score_row(data_source: str, solution: str, ground_truth: Any, extra_info: Any) -> Any:
    result = _score_fn(data_source, solution, ground_truth, extra_info)
    return float(result[0]) if isinstance(result, (tuple, list)) else result  # verl: a tuple's first item


@register("prime")
class PrimeRewardManager:
    def __init__(self, context: ManagerContext, timeout: float = DEFAULT_TIMEOUT_SECONDS,
                 num_processes: int | None = None, **reward_kwargs) -> None:
        check_kwargs("prime", reward_kwargs, ("timeout", "num_processes"))
        self.context, self.timeout = context, float(timeout)
        self.num_processes = num_processes or (context.num_workers if context.num_workers > 1 else os.cpu_count() or 1)
        self._executor: ProcessPoolExecutor | None = None

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch:
        executor = self._pool()
        start = time.monotonic()
        futures = [executor.submit(_score_row, *row) for row in zip(rows.data_sources, rows.responses_text,
                                                                     rows.ground_truths, rows.extra_infos)]
        scores, extras, errors, timeouts = [], [], 0, 0
        for index, future in enumerate(futures):
            try:
                result = future.result(timeout=max(0.0, start + self.timeout - time.monotonic()))
            except FutureTimeout:
                timeouts, result = timeouts + 1, 0.0
            except Exception as error:
                if self.context.on_error == "raise":
                    self.close()
                    raise RewardFunctionError(describe_error(self.context.compute_score, rows.data_sources[index],
                                                             index, error)) from error
                errors, result = errors + 1, 0.0
            score, extra = split_result(result, self.context.compute_score, rows.data_sources[index], index)
            scores.append(score)
            extras.append(extra)
        if timeouts:
            log.warning("prime reward manager: %d of %d rows ran past %.0f s and scored 0", timeouts, len(rows),
                        self.timeout)
            self.close()  # their workers are still busy
        return ScoredBatch(scores=scores, extra=rows_extra(extras), num_errors=errors, num_timeouts=timeouts)

    def _pool(self) -> ProcessPoolExecutor:
        """The workers, started and with the reward function loaded, so the rows' clock excludes start-up."""
        if self._executor is None:
            # spawn: a fork of the trainer would copy its CUDA context and threads
            self._executor = ProcessPoolExecutor(self.num_processes, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_load, initargs=(self.context.spec,))
            for future in [self._executor.submit(_ready) for _ in range(self.num_processes)]:
                future.result()
        return self._executor

    def close(self) -> None:
        """Stop the workers at once (a stuck one is killed: it may never finish)."""
        if self._executor is None:
            return
        for process in list(getattr(self._executor, "_processes", {}).values()):
            if process.is_alive():
                process.kill()
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._executor = None
