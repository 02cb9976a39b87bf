"""`reward_model.num_workers` > 1: the reward function runs in that many spawned processes.

A reward function is Python that holds the GIL while it runs: parsing and checking math answers, or
running checks on code, can take seconds per batch. On a thread beside the controller
(`launch_reward_fn_async`) it competes with the controller's main thread for the GIL, so kernel launches
and worker-group calls wait behind it (benchmarks/reward_workers_bench.py).

In worker processes the function has interpreters of its own, and the rows score in parallel over the
cores. The rows go out in contiguous chunks, a few per worker so that slow rows spread; a worker sends
each row's result back as soon as it has it, so the pool always knows which row each worker is on and
since when. That gives the guarantees a run needs (rewards/watchdog.py):

- a row past `reward_model.reward_fn_timeout_s` gets its worker killed (whatever it is doing, C code
  included) and replaced; the rest of its chunk goes to another worker;
- the first error of any worker is raised at once, naming the row and data source, whatever the other
  workers are doing (a hang elsewhere cannot mask it);
- Ctrl-C, or any error, kills busy workers instead of waiting for them. Each worker leads a process group
  of its own: the terminal's Ctrl-C reaches only the trainer, and a kill takes the processes a reward
  function started (a code sandbox) with it;
- a progress line when a batch scores slowly.

Each worker loads the function once: the built-in table, or `custom_reward_function.path` / `.name`. A
custom function must therefore work when its file is imported in a fresh process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from hybridrl.logging.log import get_logger
from hybridrl.rewards.async_rows import blocking
from hybridrl.rewards.manager import (RewardFunctionError, RowOutcome, ScoredBatch, check_rows, collect, describe,
                                      score_row, timeout_outcome)
from hybridrl.rewards.watchdog import PROGRESS_EVERY_S, TICK_S, ScoringClock

log = get_logger("rewards")
CHUNKS_PER_WORKER = 4
MAIN_GUARD_HINT = ('the script that started training has no `if __name__ == "__main__":` guard (spawned workers '
                   "import it; its stderr above says so)")


@dataclass(frozen=True)
class ScoreFnSpec:
    """Where a reward function comes from, in a form a fresh process can load it from."""

    path: str | None = None  # custom_reward_function.path; None = the built-in table by data_source
    name: str = "compute_score"
    kwargs: dict[str, Any] = field(default_factory=dict)
    # passed only to a function that declares them or takes **kwargs: a served GenRM's reward_router_address and
    # reward_model_tokenizer (verl passes them to the custom function)
    offered: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Callable:
        if self.path is None:
            from hybridrl.rewards import default_compute_score

            return default_compute_score
        from hybridrl.rewards.custom import load_custom_reward_fn

        return load_custom_reward_fn(self.path, self.name, self.kwargs, offered_kwargs=self.offered)

    def describe(self) -> str:
        return f"{self.path}:{self.name}" if self.path is not None else "hybridrl.rewards:default_compute_score"


class WorkerTraceback(Exception):
    """The formatted traceback of an error in a worker process (the cause of the error raised here)."""


@dataclass
class _Worker:
    process: Any  # a spawn-context Process
    conn: Connection
    ready: bool = False
    rows: deque = field(default_factory=deque)  # rows sent to it, in order; rows[0] is running
    row_started: float = 0.0
    killed: bool = False  # taken by one `_kill`: its pipe is closed exactly once


@dataclass
class _Job:
    """One batch being scored: its rows, the chunks not yet sent, and the outcomes so far."""
    calls: list[tuple]
    pending: deque  # (first_row, count) chunks waiting for a worker
    outcomes: list[RowOutcome | None]
    clock: ScoringClock

    @property
    def remaining(self) -> int:
        return self.outcomes.count(None)


class ScoringPool:
    """Rows scored over `num_workers` spawned processes; started on the first batch, `close()` stops them."""

    def __init__(self, spec: ScoreFnSpec, num_workers: int, on_error: str = "raise", timeout_s: float | None = None,
                 progress_every_s: float = PROGRESS_EVERY_S, on_timeout: str | None = None) -> None:
        """`timeout_s`: the most one call may take (None: no limit); a row past it follows `on_timeout` (None: as
        `on_error`)."""
        if num_workers < 2:
            raise ValueError(f"reward_model.num_workers={num_workers}: a scoring pool needs 2 or more workers")
        self.spec, self.num_workers, self.on_error, self.timeout_s = spec, num_workers, on_error, timeout_s
        self.progress_every_s, self.on_timeout = progress_every_s, on_timeout or on_error
        check_rows(self.on_timeout)
        self._context = multiprocessing.get_context("spawn")  # a fork of the trainer would copy CUDA and threads
        self._workers: list[_Worker] = []
        self._generation = 0  # bumped by close(): a batch in flight on another thread stops
        self._batch_generation = 0
        # At exit, before multiprocessing joins its children (which would wait on a stuck worker forever).
        self._finalizer = weakref.finalize(self, _kill, self._workers)

    def score(self, responses_text: list[str], data_sources: Sequence[str], ground_truths: Sequence[Any],
              extra_infos: Sequence[dict | None]) -> ScoredBatch:
        check_rows(self.on_error, responses_text, data_sources, ground_truths, extra_infos)
        calls = list(zip(data_sources, responses_text, ground_truths, extra_infos))
        size = max(1, -(-len(calls) // (self.num_workers * CHUNKS_PER_WORKER)))
        job = _Job(calls, deque((start, min(size, len(calls) - start)) for start in range(0, len(calls), size)),
                   [None] * len(calls), ScoringClock(len(calls), self.progress_every_s, self.timeout_s))
        self._batch_generation = self._generation
        try:
            self._start_missing_workers()
            while job.remaining:
                self._dispatch(job)
                self._receive(job)
                self._enforce_deadlines(job)
                job.clock.maybe_report()
                self._check_open()
        except BaseException:
            _kill(self._workers)  # Ctrl-C or an error: busy workers are killed, never waited for
            raise
        return collect(job.outcomes)  # type: ignore[arg-type]

    @property
    def num_processes(self) -> int:
        """Worker processes started and not yet stopped (0 before the first batch and after `close()`)."""
        return len(self._workers)

    def close(self) -> None:
        """Stop the workers: idle ones are asked to exit, busy ones killed; safe to call twice."""
        self._generation += 1
        asked = []
        for worker in list(self._workers):
            if worker.ready and not worker.rows:
                try:
                    worker.conn.send(None)
                    asked.append(worker)
                except OSError:
                    pass  # already gone
        deadline = time.monotonic() + 2.0
        for worker in asked:
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
        _kill(self._workers)  # the busy, the starting and any that did not exit in time

    # ------------------------------------------------------------------------------------- workers
    def _check_open(self) -> None:
        if self._batch_generation != self._generation:
            raise RewardFunctionError("the reward scoring pool was closed (the run is stopping) while it scored a batch")

    def _start_missing_workers(self) -> None:
        self._check_open()  # never start workers for a batch whose pool was closed from another thread
        while len(self._workers) < self.num_workers:
            parent_end, child_end = self._context.Pipe(duplex=True)
            process = self._context.Process(target=_worker_main, args=(child_end, self.spec, self.on_error),
                                            name="hybridrl-reward-worker", daemon=False)
            process.start()
            child_end.close()  # so the parent sees EOF when the worker dies
            self._workers.append(_Worker(process, parent_end))

    def _dispatch(self, job: _Job) -> None:
        """Give the next chunk to every ready worker that has nothing to do."""
        for worker in self._workers:
            if not job.pending or not worker.ready or worker.rows:
                continue
            first, count = job.pending.popleft()
            try:
                worker.conn.send((first, job.calls[first:first + count]))
            except OSError:  # it died since its last message: the chunk waits for its replacement
                job.pending.appendleft((first, count))
                continue
            worker.rows.extend(range(first, first + count))
            self._start_row(worker, job, time.monotonic())

    def _start_row(self, worker: _Worker, job: _Job, now: float) -> None:
        worker.row_started = now
        job.clock.start_row(worker.rows[0], job.calls[worker.rows[0]][0])

    def _receive(self, job: _Job) -> None:
        by_conn = {worker.conn: worker for worker in self._workers}
        try:
            readable = wait(list(by_conn), timeout=TICK_S)
        except (OSError, ValueError):  # a pipe closed under us: close() on another thread
            self._check_open()
            raise
        for ready in readable:
            worker = by_conn[ready]  # type: ignore[index]
            try:
                while worker.conn.poll():
                    self._handle(worker, worker.conn.recv(), job)
            except (EOFError, OSError):
                self._check_open()  # killed by close(), not dead on its own
                self._worker_died(worker, job)

    def _handle(self, worker: _Worker, message: tuple, job: _Job) -> None:
        kind = message[0]
        if kind == "ready":
            worker.ready = True
        elif kind == "load_error":
            raise RewardFunctionError(f"a reward worker process could not load the reward function "
                                      f"{self.spec.describe()}: {message[1]}")
        elif kind == "error":
            raise RewardFunctionError(message[2]) from WorkerTraceback(message[3])
        else:  # ("row", row, outcome)
            self._finish_row(worker, message[1], message[2], job)

    def _finish_row(self, worker: _Worker, row: int, outcome: RowOutcome, job: _Job) -> None:
        assert worker.rows and worker.rows[0] == row, "a worker reports its rows in the order it was given them"
        worker.rows.popleft()
        job.outcomes[row] = outcome
        job.clock.end_row(row)
        if worker.rows:
            self._start_row(worker, job, time.monotonic())

    def _forget(self, worker: _Worker) -> None:
        if worker in self._workers:  # close() on another thread may have taken every worker
            self._workers.remove(worker)

    def _worker_died(self, worker: _Worker, job: _Job) -> None:
        worker.process.join(timeout=5)
        cause = _exit_cause(worker.process.exitcode)
        self._forget(worker)
        if not worker.ready:
            raise RewardFunctionError(
                f"a reward worker process exited before it could score ({cause}): {MAIN_GUARD_HINT}, or importing the "
                f"reward function {self.spec.describe()} killed it. Set reward_model.num_workers=1 to score in the "
                "trainer's process and see the failure there")
        if worker.rows:
            row = worker.rows.popleft()
            data_source = job.calls[row][0]
            if self.on_error == "raise":
                raise RewardFunctionError(
                    f"a reward worker process died while scoring sample {row} (data_source={data_source!r}) with "
                    f"reward_model.num_workers={self.num_workers}: {cause}. The reward function crashed its "
                    "interpreter (os._exit, a crash in native code) or the process ran out of host memory (the "
                    "kernel's OOM killer; see dmesg). Set reward_model.num_workers=1 to score in the trainer's "
                    "process and see the failure there, or reward_model.on_error=zero to score such rows 0")
            log.warning("a reward worker process died on sample %d (data_source=%r): %s; scored 0 "
                        "(reward_model.on_error=zero), worker replaced", row, data_source, cause)
            self._settle(row, RowOutcome(0.0, {}, errored=True), worker, job)
        self._start_missing_workers()

    def _enforce_deadlines(self, job: _Job) -> None:
        if self.timeout_s is None:
            return
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.rows and now - worker.row_started > self.timeout_s:
                row = worker.rows.popleft()
                _kill([worker])
                self._forget(worker)
                outcome = timeout_outcome(self.spec.describe(), row, job.calls[row][0], self.timeout_s, self.on_timeout)
                log.warning("reward function on sample %d (data_source=%r) ran past reward_model.reward_fn_timeout_s="
                            "%g s: its worker was killed and replaced; scored 0", row, job.calls[row][0], self.timeout_s)
                self._settle(row, outcome, worker, job)
                self._start_missing_workers()

    def _settle(self, row: int, outcome: RowOutcome, worker: _Worker, job: _Job) -> None:
        """Record a row its worker did not finish, and send the rest of that worker's chunk elsewhere."""
        job.outcomes[row] = outcome
        job.clock.end_row(row)
        if worker.rows:
            job.pending.appendleft((worker.rows[0], len(worker.rows)))
            worker.rows.clear()


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


_KILL_LOCK = threading.Lock()


def _kill(workers: list[_Worker]) -> None:
    """Kill every worker and its process group at once (SIGKILL: a stuck one may never finish); forget them.

    `close()` on another thread (Ctrl-C while `launch_reward_fn_async` scores) and the scoring thread's own
    clean-up can both get here for the same workers: each worker is taken by one call only, so no pipe is closed
    twice (a second `os.close` fails, or closes whatever file reused the number)."""
    with _KILL_LOCK:
        taken = [worker for worker in workers if not worker.killed]
        for worker in taken:
            worker.killed = True
        workers.clear()
    for worker in taken:
        if worker.process.is_alive():
            try:
                os.killpg(worker.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # not yet the leader of its own group
                worker.process.kill()
    for worker in taken:
        worker.process.join(timeout=5)
        worker.conn.close()


# ------------------------------------------------------------------------------ in the worker process
def _worker_main(conn: Connection, spec: ScoreFnSpec, on_error: str) -> None:
    """Load the function, then score the chunks the pool sends, one message per row, until told to stop."""
    os.setpgid(0, 0)  # a group of its own: the terminal's Ctrl-C reaches the trainer only, which stops us
    try:
        fn = blocking(spec.load())  # an async function runs each call to its end here
    except BaseException as error:  # noqa: BLE001 - reported to the trainer, which raises it
        conn.send(("load_error", f"{type(error).__name__}: {error}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the trainer has gone
            return
        if task is None:
            return
        first_row, calls = task
        for offset, call in enumerate(calls):
            _send_row(conn, fn, first_row + offset, call, on_error)


def _send_row(conn: Connection, fn: Callable, row: int, call: tuple, on_error: str) -> None:
    try:
        conn.send(("row", row, score_row(fn, row, call, on_error)))
    except RewardFunctionError as error:
        conn.send(("error", row, str(error), "".join(traceback.format_exception(error))))
    except Exception as error:  # the result could not be sent (e.g. extra info that does not pickle)
        conn.send(("error", row, describe(fn, call[0], row) + f" returned a result that cannot be sent back from "
                   f"its worker process ({type(error).__name__}: {error}); return plain numbers, strings, lists "
                   "and dicts", "".join(traceback.format_exception(error))))
