"""`reward_model.num_workers` > 1: the reward function runs in that many spawned processes.

A reward function is Python that holds the GIL while it runs: parsing and checking math answers, or
running checks on code, can take seconds per batch. On a thread beside the controller
(`launch_reward_fn_async`) it competes with the controller's main thread for the GIL, so kernel launches
and worker-group calls wait behind it (benchmarks/reward_workers_bench.py).

In worker processes the function has interpreters of its own, and the rows score in parallel over the
cores. The rows go out in contiguous chunks, a few per worker so that slow rows spread, and the results
come back in row order. Each worker loads the function once: the built-in table, or
`custom_reward_function.path` / `.name`. A custom function must therefore work when its file is
imported in a fresh process.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from hybridrl.rewards.manager import RewardFunctionError, ScoredBatch, concat_scored, score_batch

CHUNKS_PER_WORKER = 4


@dataclass(frozen=True)
class ScoreFnSpec:
    """Where a reward function comes from, in a form a fresh process can load it from."""

    path: str | None = None  # custom_reward_function.path; None = the built-in table by data_source
    name: str = "compute_score"
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Callable:
        if self.path is None:
            from hybridrl.rewards import default_compute_score

            return default_compute_score
        from hybridrl.rewards.custom import load_custom_reward_fn

        return load_custom_reward_fn(self.path, self.name, self.kwargs)


class ScoringPool:
    """`score_batch` over `num_workers` spawned processes; started on the first batch, `close()` stops it."""

    def __init__(self, spec: ScoreFnSpec, num_workers: int, on_error: str = "raise") -> None:
        if num_workers < 2:
            raise ValueError(f"reward_model.num_workers={num_workers}: a scoring pool needs 2 or more workers")
        self.spec, self.num_workers, self.on_error = spec, num_workers, on_error
        self._executor: ProcessPoolExecutor | None = None

    def score(self, responses_text: list[str], data_sources: Sequence[str], ground_truths: Sequence[Any],
              extra_infos: Sequence[dict | None]) -> ScoredBatch:
        rows = len(responses_text)
        size = max(1, -(-rows // (self.num_workers * CHUNKS_PER_WORKER)))
        futures = [self._pool().submit(_score_chunk, start, responses_text[start:start + size],
                                       data_sources[start:start + size], ground_truths[start:start + size],
                                       extra_infos[start:start + size], self.on_error)
                   for start in range(0, rows, size)]
        try:
            return concat_scored([future.result() for future in futures])
        except BrokenProcessPool as error:
            self.close()
            raise RewardFunctionError(
                f"a reward worker process died while scoring (reward_model.num_workers={self.num_workers}): the "
                "reward function crashed its interpreter or ran out of memory, or the script that started training "
                "has no `if __name__ == \"__main__\":` guard (spawned workers import it; its stderr above says so). "
                "Set reward_model.num_workers=1 to score in the trainer's process and see the failure there") from error

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # spawn: a fork of the trainer would copy its CUDA context and threads
            self._executor = ProcessPoolExecutor(self.num_workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_load_score_fn, initargs=(self.spec,))
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


_score_fn: Callable | None = None  # in a worker process: the function `_load_score_fn` loaded


def _load_score_fn(spec: ScoreFnSpec) -> None:
    global _score_fn
    _score_fn = spec.load()


def _score_chunk(first_row: int, responses_text: list[str], data_sources: Sequence[str],
                 ground_truths: Sequence[Any], extra_infos: Sequence[dict | None], on_error: str) -> ScoredBatch:
    return score_batch(responses_text, data_sources, ground_truths, extra_infos, _score_fn, on_error,
                       first_row=first_row)
