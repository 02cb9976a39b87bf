"""RayWorkerGroup on a real local Ray cluster; init_ray's hints; choose_launcher."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
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
from hybridrl.config import load_config
from hybridrl.distributed import launcher_choice
from hybridrl.distributed.launcher_choice import choose_launcher, configured_launcher
from hybridrl.distributed.ray_launcher import RayWorkerGroup, ResourcePoolManager, init_failure_hint, init_ray
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


def test_choose_launcher_only_chooses(caplog):
    """Regression: it warned about an unused address on every call (4 per run) and blamed
    ray_kwargs.ray_init.address even when the address came from RAY_ADDRESS; `configured_launcher` warns now."""
    assert choose_launcher("local", 1, "10.0.0.1:6379") == "local"
    assert caplog.records == []


@pytest.fixture
def fresh_launcher_warnings(monkeypatch, caplog):
    """No RAY_ADDRESS, no warning given yet in this process; yields the warnings configured_launcher logs."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(launcher_choice, "_WARNINGS_GIVEN", set())
    return lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def launcher_of_a_run(cfg) -> str:
    """configured_launcher called several times (preflight, tests, tools): each warning must still come once."""
    for _ in range(3):
        configured_launcher(cfg)
    return configured_launcher(cfg)


def test_ray_is_chosen_by_key_or_by_the_address_ray_job_submit_sets(fresh_launcher_warnings, monkeypatch):
    assert configured_launcher(load_config([])) == "local"
    assert configured_launcher(load_config(["trainer.launcher=ray"])) == "ray"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert configured_launcher(load_config([])) == "ray"
    assert configured_launcher(load_config(["trainer.launcher=local"])) == "local"  # the key wins


def test_an_unused_ray_address_from_the_environment_is_named_as_such_once(fresh_launcher_warnings, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert launcher_of_a_run(load_config(["trainer.launcher=local"])) == "local"
    [warning] = fresh_launcher_warnings()
    assert warning.startswith("trainer.launcher=local: the RAY_ADDRESS environment variable (10.0.0.1:6379) is not "
                              "used") and "trainer.launcher=ray" in warning
    assert "ray_kwargs.ray_init.address" not in warning


def test_an_unused_ray_address_from_the_config_is_named_by_its_key_once(fresh_launcher_warnings, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")  # the key comes first, as in init_ray
    cfg = load_config(["trainer.launcher=local", "ray_kwargs.ray_init.address=10.0.0.1:6379"])
    assert launcher_of_a_run(cfg) == "local"
    assert fresh_launcher_warnings() == [
        "trainer.launcher=local: ray_kwargs.ray_init.address=10.0.0.1:6379 is not used (the run stays on this "
        "node); set trainer.launcher=ray (or auto) to join that Ray cluster"]


def test_ray_init_settings_of_a_local_run_are_named_once(fresh_launcher_warnings):
    assert launcher_of_a_run(load_config(["ray_kwargs.ray_init.num_cpus=4"])) == "local"
    [warning] = fresh_launcher_warnings()
    assert warning.startswith("ray_kwargs.ray_init (num_cpus=4) applies to Ray runs only") and \
        "set trainer.launcher=ray to run on Ray" in warning


def test_a_ray_run_or_default_ray_init_warns_about_nothing(fresh_launcher_warnings):
    assert launcher_of_a_run(load_config(["trainer.launcher=ray", "ray_kwargs.ray_init.num_cpus=4"])) == "ray"
    assert launcher_of_a_run(load_config([])) == "local"  # ray_init is {"num_cpus": None}, the default
    assert fresh_launcher_warnings() == []


class AuthenticationError(Exception):
    """Named as Ray's (ray.exceptions.AuthenticationError), without needing Ray."""


def failed_ray_init(inner: Exception) -> ConnectionError:
    """The chain ray.init raises: its generic ConnectionError, from the real cause."""
    try:
        try:
            raise inner
        except Exception as err:
            raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6390") from err
    except ConnectionError as outer:
        return outer


def test_a_connection_error_names_its_root_cause_and_an_auth_failure_says_to_set_the_token():
    """Regression: the hint showed only "Failed to connect ..." and advised `ray start --head`, while the cause,
    an invalid auth token, was only deep in the traceback."""
    error = failed_ray_init(AuthenticationError("InvalidAuthToken: the token does not match the cluster's\n"
                                                "more detail"))
    hint = init_failure_hint("127.0.0.1:6390", error, local_cluster_running=False)
    assert hint.startswith("could not connect to the Ray cluster at '127.0.0.1:6390': Failed to connect to Ray "
                           "cluster at 127.0.0.1:6390 (root cause: AuthenticationError: InvalidAuthToken: the token "
                           "does not match the cluster's)")
    assert "requires authentication" in hint and "RAY_AUTH_MODE=token" in hint
    assert "ray start --head" not in hint and "more detail" not in hint


def test_ray_s_own_authentication_error_is_recognised():
    ray_exceptions = pytest.importorskip("ray.exceptions", reason="ray is not installed (pip install 'hybridrl[ray]')")
    error = failed_ray_init(ray_exceptions.AuthenticationError("InvalidAuthToken: token mismatch"))
    hint = init_failure_hint("127.0.0.1:6390", error, local_cluster_running=False)
    assert "(root cause: AuthenticationError: InvalidAuthToken: token mismatch" in hint
    assert "requires authentication" in hint and "ray start --head" not in hint


def test_a_root_cause_that_mentions_the_auth_token_is_an_auth_failure_too():
    error = failed_ray_init(RuntimeError("RPC rejected: missing auth token"))
    assert "RAY_AUTH_MODE=token" in init_failure_hint("auto", error, local_cluster_running=False)


def test_a_connection_error_of_another_cause_keeps_the_start_the_head_advice():
    error = failed_ray_init(TimeoutError("GCS did not answer within 60s"))
    hint = init_failure_hint("127.0.0.1:6390", error, local_cluster_running=False)
    assert "(root cause: TimeoutError: GCS did not answer within 60s)" in hint and "ray start --head" in hint
    assert "authentication" not in hint
    assert "root cause" not in init_failure_hint(None, ConnectionError("port taken"), local_cluster_running=False)


def test_hint_for_an_already_running_local_cluster():
    hint = init_failure_hint(None, ConnectionError("port taken"), local_cluster_running=True)
    assert "a Ray cluster seems to be running already: try `ray stop`, or set ray_kwargs.ray_init.address=auto" in hint


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def test_init_ray_names_an_unreachable_address():
    """In a process of its own: in this one, a cluster another test started may still be up (module fixture),
    and init_ray then reuses it instead of connecting."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridrl[ray]')")
    address = f"127.0.0.1:{free_loopback_port()}"
    code = ("from hybridrl.distributed.errors import RayInitError\n"
            "from hybridrl.distributed.ray_launcher import init_ray\n"
            "try:\n"
            f"    init_ray({{'address': {address!r}}})\n"
            "except RayInitError as error:\n"
            "    print(error)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert f"could not connect to the Ray cluster at '{address}'" in out.stdout, out.stderr[-2000:]
    assert "ray start --head" in out.stdout


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
