"""checkpoint/state_io.py: tensors in safetensors, state in JSON, round trips exact; pickles never run."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import torch

from safetensors import safe_open

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.role_files import rng_state
from hybridrl.checkpoint.state_io import load_legacy_pt, load_state, load_tensors, save_state, save_tensors


def test_weights_round_trip_bitwise_with_tied_tensors_stored_once(tmp_path):
    embed = torch.randn(7, 4)
    weights = {"embed.weight": embed, "lm_head.weight": embed, "norm.weight": torch.randn(4).bfloat16(),
               "rows": torch.arange(12.0).reshape(3, 4).t()}  # non-contiguous
    path = str(tmp_path / "model.safetensors")
    save_tensors(path, weights)
    back = load_tensors(path)
    assert back.keys() == weights.keys()
    for name, tensor in weights.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    assert back["lm_head.weight"] is back["embed.weight"]
    with safe_open(path, framework="pt") as f:
        assert sorted(f.keys()) == ["embed.weight", "norm.weight", "rows"]  # the tied tensor is written once


def test_optimizer_schedule_and_rng_state_round_trip(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    state = {"optimizer": optimizer.state_dict(), "lr_scheduler": scheduler.state_dict(), "rng": rng_state(),
             "odd": {"nan": math.nan, "inf": -math.inf, "pair": (1, "a"), 3: [None, True]}}
    save_state(str(tmp_path / "s"), state)
    back, tensors = load_state(str(tmp_path / "s"))
    assert set(back["optimizer"]["state"]) == {0, 1}  # integer keys stay integers
    for index, slots in state["optimizer"]["state"].items():
        for name, value in slots.items():
            assert torch.equal(back["optimizer"]["state"][index][name], value)
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert back["lr_scheduler"] == scheduler.state_dict()
    assert back["rng"]["numpy"][0] == "MT19937" and np.array_equal(back["rng"]["numpy"][1], state["rng"]["numpy"][1])
    assert back["rng"]["random"] == state["rng"]["random"] and torch.equal(back["rng"]["cpu"], state["rng"]["cpu"])
    assert math.isnan(back["odd"]["nan"]) and back["odd"]["inf"] == -math.inf and back["odd"]["pair"] == (1, "a")
    assert back["odd"][3] == [None, True]
    assert len(tensors) == 7  # 2 parameters x (step, exp_avg, exp_avg_sq) + the CPU RNG state
    json.loads((tmp_path / "s.json").read_text())  # plain JSON: readable by anything


def test_an_object_that_would_need_pickling_is_refused_at_save(tmp_path):
    with pytest.raises(TypeError, match=r"checkpoint state at .fn holds a function"):
        save_state(str(tmp_path / "s"), {"fn": lambda: 0})


class _RunsCode:
    """A pickle payload that creates a file when unpickled (what a crafted checkpoint would do)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's note on the bare pickle below
def test_a_crafted_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "extra_state.pt"
    torch.save({"lr_scheduler": {}, "rng": _RunsCode(str(marker))}, bad)
    with open(bad, "rb") as f:  # the payload is there: a plain unpickler would run it
        assert b"pwned" in f.read()
    with pytest.raises(CheckpointError, match=r"refused to load .*extra_state.pt: it holds Python objects a checkpoint "
                                              r"never contains"):
        load_legacy_pt(str(bad))
    assert not marker.exists()
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps(_RunsCode(str(marker))))  # a bare pickle, not even a torch zip file
    with pytest.raises(CheckpointError, match="refused to load"):
        load_legacy_pt(str(raw))
    assert not marker.exists()


def test_damaged_files_fail_by_name(tmp_path):
    path = tmp_path / "model.safetensors"
    save_tensors(str(path), {"w": torch.randn(64)})
    path.write_bytes(path.read_bytes()[:-40])  # a save cut short
    with pytest.raises(CheckpointError, match=r"model.safetensors is not a readable safetensors file"):
        load_tensors(str(path))
    (tmp_path / "s.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"s.json cannot be read"):
        load_state(str(tmp_path / "s"))
