"""Reward-function calls that cannot hang a run: a per-call deadline and a progress line when scoring is slow.

`reward_model.reward_fn_timeout_s` bounds every call of the reward function. How a call past it is stopped
depends on where it runs:

- worker processes (`reward_model.num_workers` > 1, rewards/pool.py): the worker is killed and replaced.
  This stops anything, C code included.
- the trainer's main thread: SIGALRM is sent to it and its handler raises `RewardCallTimeout` inside the
  call. That stops Python code and blocking calls (sleep, socket reads, subprocess waits, lock waits);
  C code that never returns to the interpreter (a catastrophic regular expression) is not stopped.
- another thread (`launch_reward_fn_async`): `RewardCallTimeout` is raised in it asynchronously
  (CPython's PyThreadState_SetAsyncExc), which lands at its next Python instruction. A call blocked
  outside Python cannot be reached there; once it has run `stuck_grace_s(timeout)` past its deadline, the
  waiter is told (`on_stuck`) and stops waiting, abandoning the (daemon) thread.

`ScoringClock` keeps rows done / total and the rows being scored now, and logs a line every
PROGRESS_EVERY_S once a batch has taken that long, naming the slowest row still running.
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from hybridrl.logging.log import get_logger

log = get_logger("rewards")

PROGRESS_EVERY_S = 30.0
TIMEOUT_KEY = "reward_model.reward_fn_timeout_s"
TICK_S = 0.05  # how often the watchdog looks; a deadline is enforced within about this much
REFIRE_S = 1.0  # the main thread is signalled again this often while an overdue call goes on
STUCK_WHY = "C code that does not return to the interpreter, or a blocking call on a scoring thread"
STUCK_FIX = ("Set reward_model.num_workers=2 or more: a call past the deadline in a worker process is killed, "
             "whatever it is doing")


class RewardCallTimeout(BaseException):
    """Raised inside a reward-function call that ran past its deadline. A BaseException, so that a
    function's own `except Exception` does not swallow it."""


def stuck_grace_s(timeout_s: float) -> float:
    """How long past its deadline an interrupted call on a thread may take to stop before it is abandoned."""
    return min(30.0, max(2.0, 0.1 * timeout_s))


@dataclass
class RowInFlight:
    row: int
    data_source: str
    started: float  # time.monotonic()


class ScoringClock:
    """Progress of one batch: rows done of `total`, the rows being scored now, and the slow-scoring line."""

    def __init__(self, total: int, every_s: float = PROGRESS_EVERY_S, timeout_s: float | None = None,
                 what: str = "reward scoring") -> None:
        self.total, self.done, self.every_s, self.timeout_s, self.what = total, 0, every_s, timeout_s, what
        self.started = time.monotonic()
        self._next_report = self.started + every_s
        self._running: dict[int, RowInFlight] = {}
        self._lock = threading.Lock()

    def start_row(self, row: int, data_source: str) -> None:
        with self._lock:
            self._running[row] = RowInFlight(row, str(data_source), time.monotonic())

    def end_row(self, row: int) -> None:
        with self._lock:
            if self._running.pop(row, None) is not None:
                self.done += 1

    def running(self) -> list[RowInFlight]:
        with self._lock:
            return list(self._running.values())

    def overdue(self, now: float) -> list[RowInFlight]:
        """Rows running longer than the timeout (none without one)."""
        if self.timeout_s is None:
            return []
        return [r for r in self.running() if now - r.started > self.timeout_s]

    def maybe_report(self, now: float | None = None) -> None:
        """Log the progress line when the next report is due (every `every_s` from the batch's start)."""
        now = time.monotonic() if now is None else now
        if now < self._next_report:
            return
        self._next_report = now + self.every_s
        log.warning(self.progress_line(now))

    def progress_line(self, now: float) -> str:
        line = f"{self.what} is slow: {self.done}/{self.total} rows done after {now - self.started:.0f} s"
        running = self.running()
        if running:
            slowest = min(running, key=lambda r: r.started)
            line += (f"; the slowest row still running is row {slowest.row} (data_source={slowest.data_source!r}, "
                     f"{now - slowest.started:.0f} s)")
        else:
            line += "; no row is running yet (the scoring worker processes are starting)"
        limit = f"{TIMEOUT_KEY}={self.timeout_s:g} s" if self.timeout_s is not None else f"{TIMEOUT_KEY}=null"
        return line + f" ({limit})"


_stuck_handlers = threading.local()  # per thread: who to tell about a call that could not be stopped


@contextmanager
def stuck_calls_reported_to(handler: Callable[[RowInFlight], None]) -> Iterator[None]:
    """Within this block, the watchdogs of this thread's scoring tell `handler` about a stuck call (the waiter
    of a scoring thread: it stops waiting), whichever reward manager runs the calls."""
    previous = getattr(_stuck_handlers, "handler", None)
    _stuck_handlers.handler = handler
    try:
        yield
    finally:
        _stuck_handlers.handler = previous


class CallWatchdog:
    """The calls of one `score_batch` on the current thread: progress lines and the per-call deadline.

    Use as a context manager around the batch, and `call(row, data_source, fn, args)` for each call."""

    def __init__(self, clock: ScoringClock, on_stuck: Callable[[RowInFlight], None] | None = None) -> None:
        self.clock = clock
        self.on_stuck = on_stuck or getattr(_stuck_handlers, "handler", None)
        self._thread = threading.current_thread()
        self._on_main = self._thread is threading.main_thread()
        self._lock = threading.Lock()
        self._current: RowInFlight | None = None
        self._fired_at: float | None = None  # when the current call was first interrupted
        self._last_fired = 0.0
        self._stuck_logged = False
        self.abandoned = False  # a call on a thread that could not be stopped: the batch is given up
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._previous_handler: Any = None

    def __enter__(self) -> CallWatchdog:
        if self._on_main and self.clock.timeout_s is not None:
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
        self._monitor = threading.Thread(target=self._watch, name="hybridrl-reward-watchdog", daemon=True)
        self._monitor.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join()
        if self._on_main and self.clock.timeout_s is not None:
            signal.signal(signal.SIGALRM, self._previous_handler)

    def call(self, row: int, data_source: str, fn: Callable, args: tuple) -> Any:
        """`fn(*args)`, timed as row `row`; raises RewardCallTimeout when it runs past the deadline."""
        with self._lock:
            self._current, self._fired_at = RowInFlight(row, str(data_source), time.monotonic()), None
        self.clock.start_row(row, data_source)
        try:
            try:
                return fn(*args)
            finally:
                self._end_call()  # an asynchronous RewardCallTimeout may land here: it is caught below
        except RewardCallTimeout:
            self._end_call()
            raise
        finally:
            if self.abandoned:  # the waiter has gone: stop scoring the rest of the batch on this thread
                raise RewardCallTimeout(row)

    def _end_call(self) -> None:
        with self._lock:
            current, self._current = self._current, None
            if current is not None and self._fired_at is not None and not self._on_main:
                _set_async_exc(self._thread, None)  # fired but not landed yet: it must not land after the call
        if current is not None:
            self.clock.end_row(current.row)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self._current is not None and self._fired_at is not None:
            raise RewardCallTimeout(self._current.row)
        if callable(self._previous_handler):  # not ours (e.g. a test runner's alarm): pass it on
            self._previous_handler(signum, frame)

    def _watch(self) -> None:
        while not self._stop.wait(TICK_S) and not self.abandoned:
            now = time.monotonic()
            self.clock.maybe_report(now)
            if self.clock.timeout_s is not None:
                self._enforce(now, self.clock.timeout_s)

    def _enforce(self, now: float, timeout_s: float) -> None:
        stuck = None
        with self._lock:
            current = self._current
            if current is None or now - current.started <= timeout_s:
                return
            if self._fired_at is None:
                self._fired_at = self._last_fired = now
                self._interrupt(first=True)
            elif self._on_main and now - self._last_fired >= REFIRE_S:
                self._last_fired = now
                self._interrupt(first=False)
            if not self.abandoned and now - current.started > timeout_s + stuck_grace_s(timeout_s):
                stuck = current
                self.abandoned = not self._on_main  # a thread's call is given up; the main thread has no waiter
        if stuck is not None:
            self._report_stuck(stuck, now)

    def _report_stuck(self, stuck: RowInFlight, now: float) -> None:
        if self._stuck_logged:
            return
        self._stuck_logged = True
        log.error(f"the reward function on row {stuck.row} (data_source={stuck.data_source!r}) has run "
                  f"{now - stuck.started:.0f} s, past {TIMEOUT_KEY}={self.clock.timeout_s:g} s, and could not be "
                  f"interrupted: it is blocked outside Python ({STUCK_WHY}). {STUCK_FIX}")
        if self.on_stuck is not None and not self._on_main:
            self.on_stuck(stuck)

    def _interrupt(self, first: bool) -> None:
        if self._on_main:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)
        elif first:  # once: a second one could land after the first was handled
            _set_async_exc(self._thread, RewardCallTimeout)


def _set_async_exc(thread: threading.Thread, exc_type: type[BaseException] | None) -> None:
    """Raise `exc_type` in `thread` at its next Python instruction (None: cancel a pending one)."""
    target = ctypes.py_object(exc_type) if exc_type is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0), target)
