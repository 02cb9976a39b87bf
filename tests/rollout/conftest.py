"""Rollout tests run tiny models: one intra-op thread avoids thread-sync overhead on shared CPUs."""

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(num_threads)
