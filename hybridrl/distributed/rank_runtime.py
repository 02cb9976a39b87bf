"""What runs inside one rank: torch.distributed set-up, the worker's construction and method calls.

Shared by the local (multiprocessing) and the Ray launcher so both run workers the same way.
"""

from __future__ import annotations

import gc
import os
import signal
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.utils.gc_time import freeze_startup_objects

from .cpu_threads import share_cpu_threads
from .wire import encode


def setup_torch_distributed(*, rank: int, world_size: int, master_addr: str, master_port: int, backend: str,
                            device: str | None, env: dict[str, str] | None = None) -> None:
    """Set the torchrun-style environment, pin the GPU and join the process group.

    `device` is the physical GPU id (a string, as CUDA_VISIBLE_DEVICES spells it) or None for CPU;
    on a GPU the worker sees exactly that device, as `cuda:0`.
    """
    os.environ.update(env or {})
    os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size))
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
        os.environ["LOCAL_RANK"] = "0"  # the one visible device
        torch.cuda.set_device(0)
        check_one_visible_gpu(device)
    share_cpu_threads(world_size + 1)  # the group's ranks and the controller
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size, timeout=collective_timeout())


COLLECTIVE_TIMEOUT_ENV = "HYBRIDRL_COLLECTIVE_TIMEOUT_S"  # set by the trainer from actor_rollout_ref.nccl_timeout


def collective_timeout() -> timedelta | None:
    """How long a collective may wait for the other ranks before failing (None: torch's default)."""
    seconds = os.environ.get(COLLECTIVE_TIMEOUT_ENV)
    return timedelta(seconds=float(seconds)) if seconds else None


def check_one_visible_gpu(device: str) -> None:
    """A rank must see exactly its own GPU; more means CUDA started before CUDA_VISIBLE_DEVICES was set
    and every rank would run on the same physical device."""
    count = torch.cuda.device_count()
    if count != 1:
        raise RuntimeError(f"this rank should see only GPU {device} but sees {count}: CUDA was initialised "
                           "before CUDA_VISIBLE_DEVICES was set in the worker process; start workers through "
                           "hybridrl's launchers (which set it at process start) and do not query CUDA at "
                           "import time in the main module")


def teardown_torch_distributed() -> None:
    """Leave the process group and hand the start-up objects frozen by `build_worker` back to the garbage
    collector: frozen objects outlive the interpreter's teardown, which nanobind extensions then report as
    leaks (triton's, imported on CPU too through transformers: ~30 `nanobind: leaked ...` lines per rank)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.unfreeze()


def defer_stop_signals_to_controller() -> None:
    """A rank of a local group leaves SIGINT and SIGTERM to its controller (the trainer, its parent), which
    finishes the step, saves and then stops the ranks: Ctrl-C reaches the whole foreground process group and
    Slurm signals every process of a job, and a rank that died at once would fail the step it was asked to
    finish. SIGINT is ignored; SIGTERM is ignored with a line in the rank's log while the controller lives, and
    ends the rank once the controller is gone (its pipe closing ends an idle rank anyway). The controller
    stops ranks with SIGKILL when it must abort them."""
    controller = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_sigterm(signum: int, frame: Any) -> None:
        if os.getppid() == controller:
            os.write(2, f"[hybridrl] SIGTERM ignored by this rank: its controller (pid {controller}) finishes the "
                        f"step and stops the ranks\n".encode())
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def build_worker(factory: Callable[..., Any], init_kwargs: dict[str, Any]) -> Any:
    """The rank's worker; its start-up objects (modules, the model's Python objects) are then frozen out of
    the garbage collector's full collections (utils/gc_time.py)."""
    worker = factory(**init_kwargs)
    freeze_startup_objects()
    return worker


def call_method(worker: Any, method: str, args: tuple, kwargs: dict[str, Any]) -> tuple[str, Any]:
    """Run `worker.method(*args, **kwargs)`: ("ok", result) or ("error", the formatted traceback)."""
    fn = getattr(worker, method, None)
    if fn is None or not callable(fn):
        public = sorted(name for name in dir(worker) if not name.startswith("_") and callable(getattr(worker, name)))
        return "error", (f"AttributeError: {type(worker).__name__} has no method {method!r}; "
                         f"its public methods are {public}\n")
    try:
        return "ok", fn(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - reported to the controller, which re-raises it as WorkerError
        return "error", traceback.format_exc()


def encode_reply(reply: tuple[str, Any]) -> list[memoryview]:
    """Pickle a reply (`wire.encode`); an unpicklable result becomes an error reply naming the problem."""
    try:
        return encode(reply)
    except Exception:  # noqa: BLE001 - sent to the controller
        note = ("the method's return value could not be pickled to send it to the controller; return plain "
                "Python values, CPU tensors or a Batch\n")
        return encode(("error", traceback.format_exc() + note))
