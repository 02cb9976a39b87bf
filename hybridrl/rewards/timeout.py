"""Run a function in a fresh process with a wall-clock limit (verl's `timeout_limit`, without its fork).

verl bounds sympy's `simplify` (which can run for minutes on adversarial input) by forking a process per
call. Forking a trainer that holds CUDA contexts and threads is unsafe, so here the process comes from
a fork server that has already imported sympy: the same isolation and timeout, and a cheap start.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import threading
from typing import Any, Callable

_context = None
_context_lock = threading.Lock()


def _fork_server():
    global _context
    with _context_lock:
        if _context is None:
            _context = multiprocessing.get_context("forkserver")
            preload = ["sympy", "hybridrl.rewards.prm800k"]
            if importlib.util.find_spec("math_verify") is not None:
                preload.append("math_verify")
            _context.set_forkserver_preload(preload)
        return _context


def _child(connection, fn: Callable, args: tuple) -> None:
    try:
        connection.send((True, fn(*args)))
    except Exception as error:  # noqa: BLE001 - reported to the caller, which decides
        connection.send((False, f"{type(error).__name__}: {error}"))
    finally:
        connection.close()


def call_with_timeout(fn: Callable, args: tuple, seconds: float) -> Any:
    """`fn(*args)` in a separate process; TimeoutError after `seconds`, RuntimeError if it raised or died.

    `fn` must be a module-level function (it is pickled by reference)."""
    context = _fork_server()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(send, fn, args), daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} did not finish within {seconds} s")
        succeeded, value = receive.recv()
    except EOFError as error:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}'s process died (exit code {process.exitcode})") from error
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
        process.join()
    if not succeeded:
        raise RuntimeError(value)
    return value
