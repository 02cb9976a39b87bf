"""Where agent-loop work runs besides the event loop: thread pools for tokenizer work and plain-function tools,
and a process pool for tools that ask for one.

Tool threads are daemon threads and tool processes are terminated at shutdown: a tool that hangs is cut
off by the session's timeout (the model is told) but Python cannot stop the thread running it, and such a
thread must not keep the process from exiting, as the standard ThreadPoolExecutor's would (it joins its
threads at exit).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable, cast


class DaemonThreadPool:
    """A minimal `submit(fn, *args) -> Future` pool of `num_threads` daemon threads."""

    def __init__(self, num_threads: int, name: str):
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(num_threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._tasks.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # handed to the awaiting coroutine
                future.set_exception(error)

    def shutdown(self) -> None:
        """Idle threads stop; a thread still inside a hung call stops when the call returns."""
        for _ in self._threads:
            self._tasks.put(None)


class ToolExecutors:
    """The agent loops' pools, `rollout.agent.num_workers` workers each: threads for tokenizer work (chat
    templates, decoding), daemon threads for plain-function tools (so hung tools cannot stall rendering), and
    a process pool created when a tool asks for `executor="process"`."""

    def __init__(self, num_workers: int):
        self.num_workers = max(1, int(num_workers))
        self.threads = ThreadPoolExecutor(self.num_workers, thread_name_prefix="hybridrl-agent")
        self.tool_threads = DaemonThreadPool(self.num_workers, "hybridrl-tool")
        self._processes: ProcessPoolExecutor | None = None

    async def in_thread(self, fn: Callable[[], Any]) -> Any:
        """`fn()` on the tokenizer-work pool."""
        return await asyncio.wrap_future(self.threads.submit(fn))

    async def in_tool_thread(self, fn: Callable[[], Any]) -> Any:
        """`fn()` on the tool pool, with the interpreter's switch interval lowered meanwhile so a CPU-bound tool
        hands the GIL back to the engine loop quickly (utils/threads.py)."""
        from hybridrl.utils.threads import submit_responsive

        return await asyncio.wrap_future(submit_responsive(cast(ThreadPoolExecutor, self.tool_threads), fn))

    async def in_process(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a spawned process (forking a process that runs threads, and may hold CUDA, is unsafe)."""
        if self._processes is None:
            import multiprocessing

            self._processes = ProcessPoolExecutor(self.num_workers, mp_context=multiprocessing.get_context("spawn"))
        return await asyncio.wrap_future(self._processes.submit(fn, *args))

    def shutdown(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.tool_threads.shutdown()
        if self._processes is not None:
            processes = list(getattr(self._processes, "_processes", {}).values())
            self._processes.shutdown(wait=False, cancel_futures=True)
            for process in processes:  # a tool process still inside a hung call would block interpreter exit
                process.terminate()
            self._processes = None
