"""Each process of a node (controller + ranks) gets an equal share of the cores for torch's threads."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed import cpu_threads
from hybridrl.distributed.cpu_threads import PROCESSES_ENV, controller_cpu_threads, share_cpu_threads


@pytest.fixture
def sixteen_cores(monkeypatch):
    """An H200 host's 16 cores, and this process's thread count put back afterwards."""
    monkeypatch.setattr(cpu_threads, "num_visible_devices", lambda kind: 16 if kind == "cpu" else 0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(PROCESSES_ENV, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_controller_and_two_ranks_split_sixteen_cores(sixteen_cores):
    assert [cpu_threads.threads_per_process(n) for n in (1, 3, 5, 100)] == [16, 5, 3, 1]
    share_cpu_threads(3)
    assert torch.get_num_threads() == 5


def test_the_trainers_node_count_wins_over_the_groups(sixteen_cores, monkeypatch):
    monkeypatch.setenv(PROCESSES_ENV, "4")  # three one-rank groups (per-role devices) and the controller
    share_cpu_threads(2)  # what one group of one rank would count
    assert torch.get_num_threads() == 4


def test_an_explicit_omp_num_threads_wins(sixteen_cores, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    torch.set_num_threads(2)
    share_cpu_threads(3)
    assert torch.get_num_threads() == 2  # left as the environment made it


def test_the_controller_gets_its_threads_back(sixteen_cores):
    torch.set_num_threads(2)
    with controller_cpu_threads(16):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
