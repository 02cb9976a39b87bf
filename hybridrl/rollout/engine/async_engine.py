"""`AsyncLLMEngine`: the asyncio front end of the engine's request API (rollout.base.RequestEngine).

Any number of coroutines await `generate(request_id, prompt_ids, params)`; ONE engine-loop task runs
`LLMEngine.step()` while requests are in flight, so requests that arrive while others decode join the
running batch (continuous batching) and a request paused for a tool leaves the others decoding. Adds and
aborts are queued and applied by the loop between steps, never during one. Steps run on one worker
thread by default: while the device decodes, the event loop stays free for tool calls and rewards
(torch releases the GIL inside its kernels and while it waits for the device).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from hybridrl.rollout.base import SamplingParams, TokenOutput
from hybridrl.rollout.engine.sequence import Sequence



class RequestCore(Protocol):
    """What the front end drives: `LLMEngine`'s request API (a Protocol, so this module and the engine's do not
    import each other)."""

    device: torch.device | str
    requests: dict[str, Sequence]

    def make_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Sequence: ...

    def submit_request(self, seq: Sequence) -> None: ...

    def abort_request(self, request_id: str) -> TokenOutput | None: ...

    def step(self) -> list[tuple[str, TokenOutput]]: ...

    def has_unfinished_requests(self) -> bool: ...

    def take_metrics(self) -> dict[str, float]: ...

# Event-loop turns given to callers after a step hands out results (`_let_callers_react`): a trajectory's
# own code, a tool awaiting one thing (asyncio.sleep(0), a ready future) and its next `generate`.
REACT_YIELDS = 3


@dataclass
class _Op:
    """A queued add (`seq` set), abort or metrics read, applied by the engine loop between steps."""

    kind: str
    request_id: str = ""
    seq: Sequence | None = None
    done: asyncio.Future | None = None  # abort: its TokenOutput or None; metrics: the dict


class AsyncLLMEngine:
    """RequestEngine over an `LLMEngine`. `step_in_thread=False` steps on the event loop itself (it then
    blocks other coroutines for a step's duration)."""

    def __init__(self, engine: RequestCore, *, step_in_thread: bool = True) -> None:
        self.engine = engine
        self.step_in_thread = step_in_thread
        self._ops: list[_Op] = []
        self._waiters: dict[str, asyncio.Future] = {}  # request id -> the future its `generate` awaits
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        device = torch.device(engine.device)
        if device.type == "cuda" and device.index is None:  # "cuda": the creating thread's current device
            device = torch.device("cuda", torch.cuda.current_device())
        self._device = device

    @property
    def num_in_flight(self) -> int:
        """Requests whose `generate` has not returned."""
        return len(self._waiters)

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        """One continuation of `prompt_ids` (see `LLMEngine.add_request` for the sampling key). Cancelling the
        awaiting task aborts the request. A bad request raises here, before it is queued."""
        if request_id in self._waiters:
            raise ValueError(f"request {request_id!r} is already in flight; request ids must be unique")
        # Checks and prompt hashing (O(conversation) per turn) run here, beside the step in flight.
        seq = self.engine.make_request(request_id, prompt_ids, params)
        result = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = result
        self._submit(_Op("add", request_id, seq))
        try:
            return await result
        except asyncio.CancelledError:
            if self._waiters.get(request_id) is result:
                del self._waiters[request_id]
                self._submit(_Op("abort", request_id))
            raise

    async def abort(self, request_id: str) -> TokenOutput | None:
        """Stop a request; its `generate` returns what it generated so far (stop_reason `abort`), as does this
        call. None when it is not in flight (it finished already, or never started)."""
        if request_id not in self._waiters:
            return None
        done = asyncio.get_running_loop().create_future()
        self._submit(_Op("abort", request_id, done=done))
        return await done

    async def abort_all(self) -> dict[str, TokenOutput]:
        """Abort every request in flight (asynchronous training before a weight update): request id -> what
        it had generated. Resume each later with `rollout.base.resume_request`."""
        ids = list(self._waiters)
        outputs = await asyncio.gather(*(self.abort(request_id) for request_id in ids))
        return {request_id: out for request_id, out in zip(ids, outputs) if out is not None}

    async def take_metrics(self) -> dict[str, float]:
        """`LLMEngine.take_metrics` read between steps: the request API's rollout/* metrics since the last take."""
        if self._task is None:
            return self.engine.take_metrics()
        done = asyncio.get_running_loop().create_future()
        self._submit(_Op("metrics", done=done))
        return await done

    def close(self) -> None:
        """Stop the worker thread (a later call starts a new one)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # --- the engine loop ------------------------------------------------------------------------
    def _submit(self, op: _Op) -> None:
        self._ops.append(op)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="hybridrl-engine-loop")

    async def _loop(self) -> None:
        """Apply queued operations, step while requests are in flight, hand each finished one its result;
        the task ends when nothing is left (the next request starts another)."""
        try:
            while True:
                self._apply_ops()
                if not self.engine.has_unfinished_requests():
                    return
                finished = await self._step()
                for request_id, output in finished:
                    self._resolve(request_id, output)
                if finished:
                    await self._let_callers_react()
        except asyncio.CancelledError:  # the event loop is closing (asyncio.run ended with requests in flight)
            self._abandon(asyncio.CancelledError())
            raise
        except Exception as exc:  # a failed step fails every request in flight, with its cause
            self._abandon(exc)
        finally:
            self._task = None

    @staticmethod
    async def _let_callers_react() -> None:
        """Before the next step, let the coroutines just handed a result run: a fast tool call (synchronous, or
        one await deep) then submits the trajectory's next turn in time to join the next step. Stepping at
        once instead, the step queues the next decode burst before that turn is seen, and the turn waits a
        whole burst longer (8 decode steps by default) per tool call."""
        for _ in range(REACT_YIELDS):
            await asyncio.sleep(0)

    async def _step(self) -> list[tuple[str, TokenOutput]]:
        if not self.step_in_thread:
            finished = self.engine.step()
            await asyncio.sleep(0)  # let the coroutines waiting on other things (tools) run
            return finished
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="hybridrl-engine", initializer=self._bind_device)
        running = self._executor.submit(self.engine.step)
        try:
            return await asyncio.wrap_future(running)
        except asyncio.CancelledError:
            running.result()  # the step must end before anyone touches the engine again
            raise

    def _bind_device(self) -> None:
        """The worker thread's current CUDA device is the engine's: events, pinned copies and streams taken
        without a device (decode_step.copy_to_host) are per thread and would otherwise land on device 0."""
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)

    def _apply_ops(self) -> None:
        ops, self._ops = self._ops, []
        for op in ops:
            if op.kind == "add":
                self._add(op)
            elif op.kind == "abort":
                output = self.engine.abort_request(op.request_id)
                if output is not None:
                    self._resolve(op.request_id, output)
                _settle(op.done, output)
            else:
                _settle(op.done, self.engine.take_metrics())

    def _add(self, op: _Op) -> None:
        waiter = self._waiters.get(op.request_id)
        if waiter is None or waiter.done():  # cancelled before it started
            return
        assert op.seq is not None, "an add carries its sequence"
        try:
            self.engine.submit_request(op.seq)
        except Exception as exc:  # a bad request fails its own caller only
            del self._waiters[op.request_id]
            waiter.set_exception(exc)

    def _resolve(self, request_id: str, output: TokenOutput) -> None:
        waiter = self._waiters.pop(request_id, None)
        _settle(waiter, output)

    def _abandon(self, exc: BaseException) -> None:
        """After a failed or cancelled loop: abort what the engine still runs and fail every waiter."""
        for request_id in list(self.engine.requests):
            self.engine.abort_request(request_id)
        waiters, self._waiters = self._waiters, {}
        for waiter in [*waiters.values(), *(op.done for op in self._ops)]:
            if waiter is not None and not waiter.done():
                if isinstance(exc, asyncio.CancelledError):
                    waiter.cancel()
                else:
                    waiter.set_exception(exc)
        self._ops = []


def _settle(future: asyncio.Future | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)
