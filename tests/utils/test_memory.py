"""PhaseMemory: per-phase peak allocated memory on CUDA; nothing recorded (and nothing breaks) on CPU."""

from __future__ import annotations

import gc

import pytest
import torch

from hybridrl.utils.memory import PREFIX, PhaseMemory, allocated_bytes

MIB = 2 ** 20


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_without_cuda_phases_run_and_record_nothing(device):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("covers a CUDA-less process asking for cuda")
    tracker = PhaseMemory(device)
    ran = []
    with tracker.phase("gen"):
        with tracker.phase("inner"):
            ran.append(True)
    assert ran == [True] and not tracker.enabled
    assert tracker.metrics() == {} and tracker.pop_metrics() == {}


def test_errors_inside_a_phase_propagate():
    tracker = PhaseMemory("cpu")
    with pytest.raises(KeyError):
        with tracker.phase("gen"):
            raise KeyError("x")


def hold(mib: int) -> torch.Tensor:
    return torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")


@pytest.mark.gpu
def test_cuda_peaks_per_phase_nested_and_overall():
    gc.collect()  # engines of earlier tests: their KV caches (mapped outside PyTorch) are freed now, not mid-test
    torch.cuda.synchronize()
    base = allocated_bytes(torch.device("cuda", torch.cuda.current_device())) / 2 ** 30
    tracker = PhaseMemory("cuda")
    with tracker.phase("update_actor"):
        with tracker.phase("gen"):
            del_me = hold(256)
            del del_me
        keep = hold(64)  # the outer phase's peak must still include gen's 256 MiB
    big = hold(512)  # between phases: only the overall peak sees it
    del big
    with tracker.phase("ref"):
        tmp = hold(32)
        del tmp
    with tracker.phase("ref"):  # a repeated phase keeps its max
        tmp = hold(16)
        del tmp
    metrics = tracker.pop_metrics()
    gb = MIB / 2 ** 30
    assert metrics[f"{PREFIX}/gen"] == pytest.approx(base + 256 * gb, abs=4 * gb)
    assert metrics[f"{PREFIX}/update_actor"] == pytest.approx(base + 256 * gb, abs=4 * gb)
    assert metrics[f"{PREFIX}/ref"] == pytest.approx(base + 96 * gb, abs=4 * gb)  # keep (64) + 32
    assert metrics[PREFIX] == pytest.approx(base + 576 * gb, abs=4 * gb)  # keep (64) + big (512)
    assert tracker.pop_metrics() == {PREFIX: pytest.approx(base + 64 * gb, abs=4 * gb)}
    del keep
