"""RemoteCriticWorker: values equal the in-process critic's on the same value model; frozen updates."""

from __future__ import annotations

import pytest
import torch

from hybridrl.models.hf import load_value_model
from hybridrl.serving.server import TOKEN_ENV, serve
from hybridrl.workers.forward import response_values
from hybridrl.workers.remote_critic import RemoteCriticWorker
from tests.serving.helpers import LOOPBACK, running, save_value_model_dir, verl_batch


@pytest.fixture(scope="module")
def critic_dir(tmp_path_factory) -> str:
    return save_value_model_dir(str(tmp_path_factory.mktemp("critic")), seed=1)


def test_remote_values_equal_local_critic_values(critic_dir, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    batch = verl_batch([[5, 6, 7], [8, 9, 10, 11], [12]], [[20, 21], [22, 23, 24], [25]])
    with torch.no_grad():
        local = response_values(load_value_model(critic_dir).eval(), batch)
    with running(serve(critic_dir, LOOPBACK, 0, "value")) as url:
        worker = RemoteCriticWorker(url, client_kwargs={"batch_size": 2, "max_concurrency": 2})
        remote = worker.compute_values(batch)["values"]
        assert worker.describe() == f"critic: frozen remote value model at {url}"
    assert remote.shape == (3, 3) and torch.allclose(remote, local, atol=1e-5)
    assert (remote[batch["response_mask"] == 0] == 0).all()
    assert worker.update_critic(batch) == {"critic/frozen": 1.0}
