"""The single-node launcher: one spawned process per rank, driven over a pipe, with prompt failure detection.

Each rank joins its own torch.distributed group (its own port), so several groups (actor, critic, ...)
coexist. A worker's stderr goes to a log file, echoed here as `(role rank N) ...` and quoted when it dies.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from typing_extensions import Self

from hybridrl.logging.log import get_logger

from . import wire
from .errors import GroupClosedError, WorkerDiedError, WorkerError
from .worker_group import RankCalls
from .worker_logs import LogForwarder, tail_lines

logger = get_logger("distributed")
_RESERVED_PORTS: set[int] = set()  # handed out in this process but maybe not bound yet by a rank 0


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now and not handed out before by this process."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _RESERVED_PORTS:
            _RESERVED_PORTS.add(port)
            return port
    raise RuntimeError("could not find a free TCP port on 127.0.0.1 after 100 tries")


@dataclass
class _RankSpec:
    role: str
    rank: int
    world_size: int
    backend: str
    master_port: int
    device: str | None
    log_path: str
    factory: Callable[..., Any]
    init_kwargs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)


def _redirect_stderr(log_path: str) -> None:
    # fd-level, so native crashes (and faulthandler's Python traceback on SIGSEGV) land in the file too
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def _rank_main(conn: Connection, spec: _RankSpec) -> None:
    """Entry point of one rank's process: set up, report ready (or the error), then serve requests."""
    import faulthandler

    from . import rank_runtime as rt

    _redirect_stderr(spec.log_path)
    rt.defer_stop_signals_to_controller()  # SIGINT/SIGTERM: the controller finishes the step, then stops ranks
    faulthandler.enable()
    try:
        rt.setup_torch_distributed(rank=spec.rank, world_size=spec.world_size, master_addr="127.0.0.1",
                                   master_port=spec.master_port, backend=spec.backend, device=spec.device,
                                   env=spec.env)
        worker = rt.build_worker(spec.factory, spec.init_kwargs)
    except BaseException:  # noqa: BLE001 - sent to the controller
        import traceback

        wire.send(conn, rt.encode_reply(("error", traceback.format_exc())))
        return
    wire.send(conn, rt.encode_reply(("ok", os.getpid())))
    while True:
        try:
            request = wire.recv(conn)
        except EOFError:  # the controller is gone
            break
        if request is None:
            break
        method, args, kwargs = request
        wire.send(conn, rt.encode_reply(rt.call_method(worker, method, args, kwargs)))
    rt.teardown_torch_distributed()


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "it stopped answering (exit code unknown)"
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
        hint = " (SIGKILL often means the OOM killer)" if -exitcode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {exitcode}"


@contextlib.contextmanager
def _child_environment(device: str | None):
    """Start a rank process with CUDA_VISIBLE_DEVICES already set to its GPU.

    Setting it inside the child is too late if anything there touches CUDA first (e.g. a spawned
    child re-imports the parent's main module, which may call torch.cuda.is_available()): CUDA reads
    the variable once, so both ranks of a group would silently share physical GPU 0."""
    if device is None:
        yield
        return
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    try:
        yield
    finally:
        if previous is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous


def _physical_gpu(device_id: int) -> str:
    """Translate an index into this process's visible GPUs to the id CUDA_VISIBLE_DEVICES uses."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(device_id)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if device_id >= len(ids):
        raise ValueError(f"device id {device_id} is out of range: CUDA_VISIBLE_DEVICES={visible!r} shows {len(ids)}")
    return ids[device_id]


def _resolve_devices(world_size: int, device_ids: list[int] | None, backend: str | None,
                     role: str) -> tuple[list[str | None], str]:
    """Per-rank physical GPU ids (None on CPU) and the backend: nccl on CUDA, gloo on CPU."""
    if device_ids is None:
        return [None] * world_size, backend or "gloo"
    if len(device_ids) != world_size:
        raise ValueError(f"{role}: device_ids {device_ids} has {len(device_ids)} entries for world_size "
                         f"{world_size}; give one device per rank")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"{role}: device_ids {device_ids} given but no CUDA device is visible; pass "
                         f"device_ids=None to run the {role} ranks on CPU")
    return [_physical_gpu(d) for d in device_ids], backend or "nccl"


class LocalWorkerGroup(RankCalls):
    """`world_size` processes on this node running `worker_factory(**init_kwargs)` in one process group.

    `worker_factory` must be picklable (a top-level class or function); arguments and results travel
    pickled, so return CPU tensors. Not thread-safe: one call at a time.
    `error_grace_s`: after one rank raises, how long to wait for the others before shutting the group
    down (ranks stuck in a collective with the failed rank never answer).
    """

    error_grace_s: float = 10.0
    shutdown_timeout_s: float = 10.0

    def __init__(self, worker_factory: Callable[..., Any], init_kwargs: dict[str, Any], *, world_size: int,
                 role: str, device_ids: list[int] | None = None, backend: str | None = None,
                 master_port: int | None = None, env: dict[str, str] | None = None) -> None:
        if world_size < 1:
            raise ValueError(f"{role}: world_size must be >= 1, got {world_size}")
        self.role, self.world_size = role, world_size
        devices, self.backend = _resolve_devices(world_size, device_ids, backend, role)
        self.master_port = master_port or find_free_port()
        # the controller's pid in the name: a later start can tell a killed run's kept logs (checkpoint.startup)
        self.log_dir = tempfile.mkdtemp(prefix=f"hybridrl-{role}-{os.getpid()}-")
        self._closed_reason: str | None = None
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._senders = ThreadPoolExecutor(max_workers=world_size, thread_name_prefix=f"hybridrl-{role}-send")
        self._log_forwarder = LogForwarder([self.log_path(rank) for rank in range(world_size)], role)
        atexit.register(self.shutdown)
        try:
            self._spawn(worker_factory, init_kwargs, devices, env or {})
            self.pids: list[int] = self._collect("__init__", list(range(world_size)))
        except WorkerError as err:  # a rank that died names its log already (WorkerDiedError's "full log: ...")
            self._abort("start-up failed")
            raise err.with_note(f"rank logs kept in {self.log_dir}") from None
        except KeyboardInterrupt:  # a signal stopped the run while the ranks started
            self._abort("start-up interrupted", keep_logs=False)
            raise
        except BaseException:
            self._abort("start-up failed")
            raise
        logger.info("%s: %d worker process(es) up (backend %s, port %d; rank logs in %s, removed at a clean "
                    "shutdown, kept if a rank dies or stops answering)", role, world_size, self.backend,
                    self.master_port, self.log_dir)

    def _spawn(self, factory: Callable[..., Any], init_kwargs: dict[str, Any], devices: list[str | None],
               env: dict[str, str]) -> None:
        ctx = mp.get_context("spawn")
        for rank in range(self.world_size):
            spec = _RankSpec(self.role, rank, self.world_size, self.backend, self.master_port, devices[rank],
                             self.log_path(rank), factory, dict(init_kwargs), dict(env))
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_rank_main, args=(child_conn, spec), name=f"hybridrl-{self.role}-{rank}")
            try:
                with _child_environment(devices[rank]):
                    proc.start()
            except (pickle.PicklingError, AttributeError, TypeError) as err:
                raise TypeError(f"{self.role}: could not send worker_factory {factory!r} or its init_kwargs to "
                                f"a spawned process ({err}); use a top-level class or function and picklable "
                                f"arguments") from err
            finally:
                child_conn.close()
            self._procs.append(proc)
            self._conns.append(parent_conn)

    def log_path(self, rank: int) -> str:
        return os.path.join(self.log_dir, f"rank{rank}.log")

    # ------------------------------------------------------------ dispatch / collect
    def _run(self, method: str, calls: list[tuple[tuple, dict[str, Any]]]) -> list[Any]:
        """Send call i to rank i (all sends first, so ranks run in parallel), then collect in rank order."""
        if self._closed_reason is not None:
            raise GroupClosedError(f"the {self.role} worker group is shut down ({self._closed_reason}); "
                                   f"cannot call {method}(); build a new group")
        self._send_all(method, [wire.encode((method, args, kwargs)) for args, kwargs in calls])
        try:
            return self._collect(method, list(range(len(calls))))
        except KeyboardInterrupt:  # replies still in flight would answer the next call: stop the group
            self._abort(f"interrupted during {method}()", keep_logs=False)  # stopped, not failed: nothing to read
            raise

    def _send_all(self, method: str, frames: list[list[memoryview]]) -> None:
        """Write rank i's request frame to rank i, all ranks at once: a pipe write returns only once the
        rank has read most of it, so one after another the last rank would start a whole transfer per
        rank later (and the first ranks then wait for it at their first collective)."""
        sending = [self._senders.submit(wire.send, self._conns[rank], frame) for rank, frame in enumerate(frames)]
        for rank, pending in enumerate(sending):
            try:
                pending.result()
            except (BrokenPipeError, ConnectionResetError, OSError):
                raise self._died(rank, method) from None

    def _collect(self, method: str, ranks: list[int]) -> list[Any]:
        """Replies of `ranks` in rank order; the lowest failing rank's error if any rank raised."""
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline: float | None = None  # set when the first error arrives: the grace period for the others
        pending = set(ranks)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            waitables = [self._conns[r] for r in pending] + [self._procs[r].sentinel for r in pending]
            if not wait(waitables, timeout):
                rank = min(errors)
                self._abort(f"rank {rank} failed in {method}()")
                raise WorkerError(self.role, rank, method, errors[rank],
                                  note=f"ranks {sorted(pending)} did not answer within {self.error_grace_s:.0f}s "
                                       f"afterwards, so the group was shut down")
            for rank in sorted(pending):
                reply = self._poll(rank, method)
                if reply is None:
                    continue
                pending.discard(rank)
                status, payload = reply
                (results if status == "ok" else errors)[rank] = payload
                if errors and deadline is None:
                    deadline = time.monotonic() + self.error_grace_s
        return self._in_rank_order(method, results, errors, ranks)

    def _poll(self, rank: int, method: str) -> tuple[str, Any] | None:
        """Rank's reply if one is ready; raises WorkerDiedError (after shutting the group down) if it died."""
        conn, proc = self._conns[rank], self._procs[rank]
        if conn.poll():
            try:
                return wire.recv(conn)
            except (EOFError, ConnectionResetError, OSError):
                raise self._died(rank, method) from None
        if not proc.is_alive():
            raise self._died(rank, method)
        return None

    def _died(self, rank: int, method: str) -> WorkerDiedError:
        proc = self._procs[rank]
        proc.join(timeout=2.0)
        cause = f"{_describe_exit(proc.exitcode)}; full log: {self.log_path(rank)}"
        error = WorkerDiedError(self.role, rank, method, cause, tail_lines(self.log_path(rank)))
        self._abort(f"rank {rank} died in {method}()")
        return error

    # ------------------------------------------------------------ shutdown
    def _abort(self, reason: str, keep_logs: bool = True) -> None:
        """Stop every rank now (SIGKILL: ranks leave SIGTERM to their controller, rank_runtime.py); the logs are
        kept for inspection unless `keep_logs` is false (a run stopped on purpose)."""
        if self._closed_reason is None:
            self._closed_reason = reason
        atexit.unregister(self.shutdown)
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
        self._join_or_kill()
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def _join_or_kill(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout_s
        for proc in self._procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        for conn in self._conns:
            conn.close()
        self._senders.shutdown(wait=False)
        self._log_forwarder.stop()

    def shutdown(self) -> None:
        """Ask every rank to exit (it tears down its process group), wait, then kill stragglers."""
        if self._closed_reason is not None:
            return
        self._closed_reason = "shutdown() was called"
        atexit.unregister(self.shutdown)
        for conn in self._conns:
            try:
                wire.send(conn, wire.encode(None))
            except OSError:
                pass  # that rank already exited; _join_or_kill reaps it
        self._join_or_kill()
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
