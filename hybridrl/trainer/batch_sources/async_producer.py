"""Generation for the asynchronous trainer: prompt groups from the trajectory buffer through the rollout's
request API (workers/request_pool.py), finished groups back into the buffer.

One round (`pump`): abort the running groups `drop` evicted; start the queued groups admission allows, on the
replicas in turn; step every replica a few engine steps (resuming parked samples first); record the groups that
finished.
- colocate_async: the rounds run on the trainer's thread during the step's gen phase, until a batch can be
  selected; then the requests still in flight are parked (aborted, tokens kept) and the engine sleeps, the
  step trains, the weights are synced, and the next gen phase resumes them at the new version.
- separate_async: the rounds run on a thread of their own while the trainer trains (the rollout has devices of
  its own). At the weight sync the actor's weights are gathered while generation goes on; only the load into
  the rollout pauses it: the round in progress ends, the requests are parked, the weights load, and
  generation resumes at the new version. Validation pauses it the same way (its batch call needs the engine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hybridrl.logging.log import get_logger
from hybridrl.rollout import SamplingParams
from hybridrl.trainer.batch_sources.trajectory_buffer import RUNNING, GroupRecord, TrajectoryBuffer
from hybridrl.workers.protocols import RequestRolloutRole
from hybridrl.workers.request_pool import GroupRequest
from hybridrl.workers.rollout import unpadded_rows

log = get_logger("hybridrl.trainer")
WAIT_S = 0.05  # how long the threads sleep between checks when there is nothing to do


class Producer:
    def __init__(self, rollout: RequestRolloutRole, buffer: TrajectoryBuffer, params: SamplingParams, *,
                 threaded: bool, steps_per_call: int, park_sleeps: bool, version: int = 0) -> None:
        self.rollout, self.buffer, self.params = rollout, buffer, params
        self.threaded, self.steps_per_call, self.park_sleeps = threaded, steps_per_call, park_sleeps
        self.version = version  # weight syncs so far: the policy the rollout generates with
        self.cond = threading.Condition()  # guards the buffer, the version and the flags below
        self.rollout_busy_s = 0.0  # time inside rollout calls (separate_async's rollout idle ratio)
        self._next_replica = 0
        self._paused = self._stop = self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ one round
    def pump(self) -> bool:
        """Cancel what `drop` evicted while it ran, admit and submit, then advance the replicas once; False when
        nothing was in flight."""
        with self.cond:
            version = self.version
            cancelled = self.buffer.take_cancelled()
            admitted = self.buffer.admit(version)
        if cancelled:
            self.rollout.forget_groups(cancelled)
        if admitted:
            self.rollout.submit_groups([self._request(group) for group in admitted], self.params, version)
        with self.cond:
            if not self.buffer.count(RUNNING):
                return False
        start = time.perf_counter()
        finished = self.rollout.advance_groups(self.steps_per_call, version)
        self.rollout_busy_s += time.perf_counter() - start
        with self.cond:
            self.buffer.finish(finished)
            self.cond.notify_all()
        return True

    def _request(self, group: GroupRecord) -> GroupRequest:
        prompt_ids = unpadded_rows(group.prompt["input_ids"], group.prompt["attention_mask"])[0]
        replica, self._next_replica = self._next_replica, (self._next_replica + 1) % self.rollout.num_replicas
        return GroupRequest(group.group_id, prompt_ids, self.params.n, group.seed,
                            row_offset=group.position * self.params.n, replica=replica)

    # ------------------------------------------------------------------ the step's batch
    def queue(self, add: Callable[[], None]) -> None:
        """Run `add` (which puts prompts into the buffer) under the buffer's lock, and wake the generator."""
        with self.cond:
            add()
            self.cond.notify_all()

    def collect(self, more_prompts: Callable[[], None]) -> list[GroupRecord]:
        """This step's groups: generated here (colocate_async) or waited for (separate_async); `more_prompts`
        queues another loader batch when a free admission slot has no prompt to take."""
        self.start()
        while True:
            with self.cond:
                self._raise_error()
                chosen = self.buffer.select(self.version)
                wants_prompts = chosen is None and self.buffer.needs_prompts()
            if chosen is not None:
                return chosen
            if wants_prompts:
                more_prompts()
            elif self.threaded:
                with self.cond:
                    self.cond.notify_all()
                    self.cond.wait(timeout=WAIT_S)
            elif not self.pump():
                raise RuntimeError(f"the asynchronous trainer cannot fill a batch of {self.buffer.batch_size} groups: "
                                   f"{self.buffer.count(RUNNING)} running, nothing to admit ({self._describe()})")

    def park(self) -> dict[str, float]:
        """colocate_async after the batch is chosen: abort what runs (tokens kept) and let the engine sleep."""
        return self.rollout.park_groups(self.park_sleeps)

    def _describe(self) -> str:
        counts = {status: self.buffer.count(status) for status in ("queued", "running", "finished", "training")}
        return ", ".join(f"{k} {v}" for k, v in counts.items()) + f"; capacity {self.buffer.capacity}"

    # ------------------------------------------------------------------ weights
    def sync(self, step: int, load: Callable[[], dict[str, float]]) -> dict[str, float]:
        """After step `step`'s update: `load` brings the weights into the rollout with nothing in flight; then
        the trained batch leaves the buffer and generation goes on at version `step`."""
        with self.paused() as metrics:
            metrics.update(load())
            self.finish_step(step)
        return metrics

    def finish_step(self, step: int) -> None:
        """The batch trained at `step` frees its admission slots; what is generated next is version `step`."""
        with self.cond:
            if self.version != step:
                self.buffer.retire()
                self.version = step
                self.cond.notify_all()

    @contextmanager
    def paused(self) -> Iterator[dict[str, float]]:
        """Nothing in flight inside (separate_async: the generating thread waits, its requests parked); yields
        the rollout's request-level metrics taken by the park."""
        metrics: dict[str, float] = {}
        if self.threaded and self._thread is not None:
            with self.cond:
                self._paused = True
                while self._busy and self._error is None:
                    self.cond.wait()
            try:
                self._raise_error()
                metrics.update(self.rollout.park_groups(False))
                yield metrics
            finally:
                with self.cond:
                    self._paused = False
                    self.cond.notify_all()
        else:
            yield metrics

    # ------------------------------------------------------------------ the generating thread
    def start(self) -> None:
        if self.threaded and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hybridrl-async-rollout", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while self._runnable():
                if not self.pump():
                    with self.cond:
                        self._busy = False
                        self.cond.notify_all()
                        if not (self._paused or self._stop):
                            self.cond.wait(timeout=WAIT_S)
        except BaseException as err:  # noqa: BLE001 - handed to the trainer's thread, which raises it
            with self.cond:
                self._error = err
                self._busy = False
                self.cond.notify_all()

    def _runnable(self) -> bool:
        with self.cond:
            self._busy = False
            self.cond.notify_all()
            while self._paused and not self._stop:
                self.cond.wait()
            self._busy = not self._stop
            return not self._stop

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"asynchronous generation failed: {type(self._error).__name__}: {self._error}") \
                from self._error

    def close(self) -> None:
        """Stop generating and abort what is in flight (the run ends)."""
        if self._thread is not None:
            with self.cond:
                self._stop = True
                self.cond.notify_all()
            self._thread.join()
            self._thread = None
        if self._error is None:
            try:
                self.rollout.park_groups(self.park_sleeps)
            except Exception as err:  # noqa: BLE001 - the run is over; a rank already gone says so elsewhere
                log.warning(f"aborting the requests still in flight at the end of the run failed: {err}")
