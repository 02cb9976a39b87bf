"""A background thread that holds the GIL without slowing the controller's main thread.

The controller scores rewards on a thread (`reward_model.launch_reward_fn_async`) while the main thread
drives the forward passes: on one GPU it launches kernels, with worker ranks it reads their replies from
pipes. Each of those steps needs the GIL, and a thread decoding 512 responses (the tokenizer holds the GIL
for ~90 ms on a 2-core box) gives it back only every `sys.getswitchinterval()` (5 ms by default).
benchmarks/controller_gil_bench.py, 2-core box, medians of 30 calls in three runs: a 2-rank `call_sharded`
took 13-17 ms alone, 93-114 ms beside such a decode, 30, 34 and 100 ms with a 0.2 ms interval while the
thread works (noisy: two ranks, the controller and the thread share the two cores).
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

SWITCH_INTERVAL_S = 2e-4

_lock = threading.Lock()
_active = 0
_saved = 0.0


def submit_responsive(pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any) -> Future:
    """`pool.submit(fn, *args)` with the interpreter's switch interval lowered to SWITCH_INTERVAL_S until
    the task is done (success or error), so the main thread gets the GIL back quickly meanwhile."""
    return start_responsive(lambda: pool.submit(fn, *args))


def start_responsive(start: Callable[[], Future]) -> Future:
    """`start()`, which begins work on a thread and returns its Future, with the switch interval lowered as in
    `submit_responsive` until that Future is done."""
    _enter()
    try:
        future = start()
    except BaseException:
        _leave()
        raise
    future.add_done_callback(lambda _: _leave())
    return future


def _enter() -> None:
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_saved, SWITCH_INTERVAL_S))
        _active += 1


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            sys.setswitchinterval(_saved)
