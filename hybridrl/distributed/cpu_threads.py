"""Torch CPU threads for the processes of one node: the controller and its worker ranks.

Every torch process starts with one intra-op thread per core. A controller with two ranks on a 16-core
H200 host then runs 48 threads on 16 cores, and OpenMP's spinning threads get descheduled at each
parallel region's barrier. Host-side work such as batch assembly and concatenation then stalls. On an H200
host, `dispatch_bench.py` with 2 ranks gave these medians:
- ref (0.5 MB back): 21-26 ms at the default; 2.5-2.9 ms with 5 threads per process (16 cores / 3);
- gen (10 MB back): 22-46 ms at the default; 10-13 ms with 5 threads per process
(session 10, calls 10h-10j, `benchmarks/results/dispatch_h200_host_session10_*.json`). torchrun gives its workers OMP_NUM_THREADS=1; here each
process gets an equal share of the cores, so a CPU-only run (gloo ranks) still computes with every core.
An explicit OMP_NUM_THREADS in the environment wins.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .placement import num_visible_devices

PROCESSES_ENV = "HYBRIDRL_NODE_PROCESSES"  # the controller plus every rank on this node, set by the trainer


def threads_per_process(processes: int) -> int:
    return max(1, num_visible_devices("cpu") // max(1, processes))


def share_cpu_threads(processes: int) -> None:
    """This process's share of the cores, for `processes` busy processes on the node (a rank: its group's
    ranks plus the controller, or `HYBRIDRL_NODE_PROCESSES` when the trainer starts several groups)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return
    torch.set_num_threads(threads_per_process(int(os.environ.get(PROCESSES_ENV) or processes)))


@contextmanager
def cpu_threads(threads: int) -> Iterator[None]:
    """`threads` intra-op threads inside (unless OMP_NUM_THREADS says otherwise), the count before restored after."""
    before = torch.get_num_threads()
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def controller_cpu_threads(processes: int) -> contextlib.AbstractContextManager[None]:
    """The controller's share while its ranks run (restored afterwards)."""
    return cpu_threads(threads_per_process(int(os.environ.get(PROCESSES_ENV) or processes)))
