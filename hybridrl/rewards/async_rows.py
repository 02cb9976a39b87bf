"""`async def` reward functions (verl's reward loop awaits them): every row of a batch in flight at once.

A function that queries a served generative reward model spends its time waiting for the server; calling the
rows one after another would hand the engine one request at a time. Here all rows run as tasks on one event
loop (at most MAX_CONCURRENT_ROWS at once, below the GenRM server's connection limit), so the engine batches
their requests. As in verl, they are called by keyword: fn(data_source=, solution_str=, ground_truth=,
extra_info=, **bound kwargs).

Each call is bounded by `reward_model.reward_fn_timeout_s` (asyncio.wait_for cancels it at its next await; a
call that blocks the event loop without awaiting cannot be interrupted, which reward_model.num_workers > 1
does: `blocking` runs one call to its end in a worker process, where the pool kills an overdue one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from typing import Any, Callable, Sequence

from hybridrl.rewards.manager import (RowOutcome, ScoredBatch, check_rows, collect,
                                      failed_call_outcome, function_name, split_result, timeout_outcome)

MAX_CONCURRENT_ROWS = 256
ROW_ARGUMENTS = ("data_source", "solution_str", "ground_truth", "extra_info")


def is_async_function(fn: Callable) -> bool:
    """True for an `async def` function, looking through functools.partial and functools.wraps."""
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            return inspect.iscoroutinefunction(fn)


def blocking(fn: Callable) -> Callable:
    """`fn` as a plain function of the row's four positional values: an async one runs to its end in a fresh
    event loop (a scoring worker process, or a thread without a loop); a plain one is `fn` itself."""
    if not is_async_function(fn):
        return fn

    @functools.wraps(fn)
    def call(*row: Any) -> Any:
        return asyncio.run(fn(**dict(zip(ROW_ARGUMENTS, row))))

    return call


def score_batch_async(responses_text: list[str], data_sources: Sequence[str], ground_truths: Sequence[Any],
                      extra_infos: Sequence[dict | None], compute_score: Callable, on_error: str = "raise",
                      timeout_s: float | None = None, on_timeout: str | None = None,
                      max_concurrent: int = MAX_CONCURRENT_ROWS) -> ScoredBatch:
    """`manager.score_batch` for an async `compute_score`: the rows concurrently, results in row order."""
    check_rows(on_error, responses_text, data_sources, ground_truths, extra_infos)
    check_rows(on_timeout or on_error)
    rows = list(zip(data_sources, responses_text, ground_truths, extra_infos))

    async def score_all() -> list[RowOutcome]:
        gate = asyncio.Semaphore(max_concurrent)
        tasks = [score_row_async(compute_score, index, row, on_error, timeout_s, on_timeout, gate)
                 for index, row in enumerate(rows)]
        return list(await asyncio.gather(*tasks))

    return collect(_run(score_all))


def _run(make: Callable[[], Any]) -> Any:
    """asyncio.run(make()), on a helper thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hybridrl-async-reward") as executor:
        return executor.submit(lambda: asyncio.run(make())).result()


async def score_row_async(fn: Callable, row: int, call: tuple, on_error: str, timeout_s: float | None,
                          on_timeout: str | None, gate: asyncio.Semaphore) -> RowOutcome:
    """One row's awaited call with `manager.score_row`'s rules (deadline, on_error, what a score may be)."""
    data_source = call[0]
    async with gate:
        # asyncio.wait, not wait_for: a TimeoutError the function raises itself (an HTTP client's) is an error
        task = asyncio.ensure_future(fn(**dict(zip(ROW_ARGUMENTS, call))))
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()
            return timeout_outcome(function_name(fn), row, data_source, timeout_s, on_timeout or on_error)
        try:
            result = task.result()
        except (SystemExit, Exception) as error:
            return failed_call_outcome(error, fn, data_source, row, on_error)
    score, extra = split_result(result, fn, data_source, row)
    return RowOutcome(score, extra)
