"""Update metrics stay tensors until the update ends, then cross to the host together."""

from __future__ import annotations

import pytest
import torch

from hybridrl.workers.update_metrics import as_metric, means


def test_means_of_tensors_and_floats_in_one_transfer(monkeypatch):
    stacks = []
    real_stack = torch.stack
    monkeypatch.setattr(torch, "stack", lambda tensors, *a, **k: stacks.append(len(tensors)) or real_stack(tensors))
    loss = torch.tensor([2.0], requires_grad=True) * 1.5
    metrics = {"actor/pg_loss": [as_metric(loss), as_metric(torch.tensor(1.0))], "actor/kl_coef": [as_metric(0.1), as_metric(0.1)],
               "actor/grad_norm": [as_metric(torch.tensor(4.0, dtype=torch.bfloat16))]}
    assert not metrics["actor/pg_loss"][0].requires_grad  # no graph kept alive
    assert means(metrics) == {"actor/pg_loss": 2.0, "actor/kl_coef": pytest.approx(0.1), "actor/grad_norm": 4.0}
    assert stacks == [3]  # every tensor of the update in one stack (one device here)


def test_a_metric_must_be_one_value():
    with pytest.raises(TypeError, match=r"one value, got a tensor of shape \(2,\).*\.mean\(\)"):
        as_metric(torch.ones(2))
