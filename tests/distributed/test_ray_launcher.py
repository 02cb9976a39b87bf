"""RayWorkerGroup on a real local Ray cluster; init_ray's hints; choose_launcher."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
import torch

from hybridrl.distributed.errors import (
    PlacementError,
    RayInitError,
    WorkerDiedError,
    WorkerError,
)
from hybridrl.distributed.ray_launcher import (
    RayWorkerGroup,
    ResourcePoolManager,
    choose_launcher,
    init_failure_hint,
    init_ray,
)
from hybridrl.utils.batch import Batch
from tests.distributed.toy_workers import ToyWorker


@pytest.mark.parametrize("launcher, nnodes, address, expected", [
    ("auto", 1, None, "local"), ("auto", 2, None, "ray"), ("auto", 1, "10.0.0.1:6379", "ray"),
    ("ray", 1, None, "ray"), ("local", 1, None, "local"),
])
def test_choose_launcher(launcher, nnodes, address, expected):
    assert choose_launcher(launcher, nnodes, address) == expected


def test_choose_launcher_errors():
    with pytest.raises(ValueError, match="trainer.launcher=local runs on one node but trainer.nnodes=2"):
        choose_launcher("local", 2, None)
    with pytest.raises(ValueError, match="not one of"):
        choose_launcher("slurm", 1, None)


def test_hint_for_an_already_running_local_cluster():
    hint = init_failure_hint(None, ConnectionError("port taken"), local_cluster_running=True)
    assert "a Ray cluster seems to be running already: try `ray stop`, or set ray_kwargs.ray_init.address=auto" in hint


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def test_init_ray_names_an_unreachable_address():
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridrl[ray]')")
    address = f"127.0.0.1:{free_loopback_port()}"
    with pytest.raises(RayInitError) as info:
        init_ray({"address": address})
    message = str(info.value)
    assert f"could not connect to the Ray cluster at '{address}'" in message and "ray start --head" in message


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridrl[ray]')")
    try:
        init_ray({"num_cpus": 2, "include_dashboard": False})
    except RayInitError as err:
        pytest.skip(f"could not start a local Ray cluster: {err}")
    yield ray
    ray.shutdown()


def test_ray_group_runs_calls_on_two_actors(ray_cluster):
    pools = ResourcePoolManager({"global_pool": 2}, {"actor": "global_pool"}, use_gpu=False)
    group = RayWorkerGroup(ToyWorker, {"scale": 3.0}, pool=pools.pool("actor"), role="actor", env={"TOY_FLAG": "ray"})
    try:
        infos = group.call_all("rank_info")
        assert [i["rank"] for i in infos] == [0, 1] and {i["TOY_FLAG"] for i in infos} == {"ray"}
        batch = Batch(tensors={"x": torch.arange(5, dtype=torch.float32)}, non_tensors={"uid": list("abcde")})
        out = group.call_sharded("double", batch)
        assert out["y"].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0] and out["rank"].tolist() == [0, 0, 0, 1, 1]
        assert group.call_all("train_step", Batch(tensors={"x": torch.ones(2)})) == [6.0, 6.0]
        assert group.call_sharded_metrics("metrics", batch)["grad_norm/max"] == 1.0
        with pytest.raises(WorkerError, match="ValueError: boom on rank 0"):
            group.call_all("fail")
        assert group.call_rank0("rank_info")["rank"] == 0
        pid = group.call_all("getpid")[1]
        threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
        with pytest.raises(WorkerDiedError, match="actor worker rank 1 died during sleep"):
            group.call_all("sleep", 60)
    finally:
        group.shutdown()
        pools.shutdown()


def test_ray_prefixes_a_rank_s_output_with_its_role_and_rank(ray_cluster, capfd):
    pools = ResourcePoolManager({"actor_rollout": 1}, {"actor_rollout": "actor_rollout"}, use_gpu=False)
    group = RayWorkerGroup(ToyWorker, {}, pool=pools.pool("actor_rollout"), role="actor_rollout")
    try:
        # Ray forwards the actor's stderr here; a line of its own (Ray holds back lines like earlier ones)
        group.call_all("say", "prefixed-greeting")
        seen, deadline = "", time.monotonic() + 30
        while "prefixed-greeting" not in seen and time.monotonic() < deadline:
            time.sleep(0.5)
            seen += capfd.readouterr().err
        line = next(line for line in seen.splitlines() if "prefixed-greeting" in line)
        assert "(actor_rollout rank 0 pid=" in line and "_RankActor" not in line  # as the local launcher's prefix
    finally:
        group.shutdown()
        pools.shutdown()


def test_pool_larger_than_the_cluster_is_a_placement_error_that_says_what_to_change(ray_cluster):
    pools = ResourcePoolManager({"global_pool": 8}, {"actor": "global_pool"}, use_gpu=False)
    with pytest.raises(PlacementError, match="pool 'global_pool' needs 8 CPU .* the Ray cluster has 2; run fewer "
                                             r"ranks \(trainer.n_gpus_per_node x trainer.nnodes\) or add CPUs"):
        pools.pool("actor").placement_group()
    started = ResourcePoolManager({"global_pool": 8}, {"actor": "global_pool"}, use_gpu=False, ray_started_here=True)
    with pytest.raises(PlacementError, match="ray_kwargs.ray_init.num_cpus=8 .*, or run fewer ranks"):
        started.pool("actor").placement_group()
    with pytest.raises(PlacementError, match="role 'critic' has no resource pool"):
        pools.pool("critic")
