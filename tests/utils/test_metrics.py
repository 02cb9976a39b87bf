"""reduce_metrics follows verl's by-name rule; timed accumulates; to_float accepts tensors, numpy and numbers."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from hybridrl.utils.metrics import reduce_metrics, timed, to_float


def test_reduce_metrics_picks_reduction_by_key_name():
    reduced = reduce_metrics({
        "actor/pg_loss": [1.0, 2.0, 6.0],
        "critic/score/max": [1.0, 5.0, 3.0],
        "critic/score/min": [4.0, -2.0, 3.0],
        "global_seqlen/minmax_diff": [1.0, 7.0],  # "max" is checked before "min", as in verl
        "timing_s/gen": 0.5,
    })
    assert reduced == {"actor/pg_loss": 3.0, "critic/score/max": 5.0, "critic/score/min": -2.0,
                       "global_seqlen/minmax_diff": 7.0, "timing_s/gen": 0.5}
    assert all(type(v) is float for v in reduced.values())


def test_reduce_metrics_accepts_tensors_and_rejects_empty_lists():
    assert reduce_metrics({"actor/entropy": [torch.tensor(1.0), np.float32(3.0)]}) == {"actor/entropy": 2.0}
    with pytest.raises(ValueError, match="actor/kl_loss"):
        reduce_metrics({"actor/kl_loss": []})


def test_timed_accumulates_repeated_names_and_survives_exceptions():
    timings: dict[str, float] = {}
    for _ in range(2):
        with timed("gen", timings):
            time.sleep(0.01)
    assert timings["gen"] >= 0.02
    with pytest.raises(RuntimeError):
        with timed("reward", timings):
            raise RuntimeError("boom")
    assert "reward" in timings and timings["reward"] >= 0.0


def test_to_float_conversions():
    assert to_float(torch.tensor([2.5], dtype=torch.bfloat16)) == 2.5
    assert to_float(np.array(3)) == 3.0
    assert to_float(7) == 7.0 and type(to_float(7)) is float
    assert to_float(True) == 1.0
    with pytest.raises(TypeError, match="one-element"):
        to_float(torch.ones(2))
    with pytest.raises(TypeError, match="str"):
        to_float("1.0")
