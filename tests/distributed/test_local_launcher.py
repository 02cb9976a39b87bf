"""LocalWorkerGroup with real spawned processes and real gloo: dispatch, SPMD, worker errors and deaths."""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time

import pytest
import torch

from hybridrl.distributed.errors import GroupClosedError, WorkerDiedError, WorkerError
from hybridrl.distributed.local_launcher import LocalWorkerGroup
from hybridrl.utils.batch import Batch
from tests.distributed.toy_workers import (
    Rank1FailsAtStartWorker,
    RoleStartupWorker,
    ToyWorker,
    TritonImportingWorker,
)


@pytest.fixture(scope="module")
def group():
    with LocalWorkerGroup(ToyWorker, {"scale": 2.0}, world_size=2, role="actor", env={"TOY_FLAG": "on"}) as g:
        yield g


def five_rows() -> Batch:
    return Batch(tensors={"x": torch.arange(5, dtype=torch.float32)}, non_tensors={"uid": list("abcde")})


def test_call_all_reaches_every_rank_with_its_environment(group):
    infos = group.call_all("rank_info")
    assert [i["rank"] for i in infos] == [0, 1]
    assert {i["RANK"] for i in infos} == {"0", "1"} and {i["WORLD_SIZE"] for i in infos} == {"2"}
    assert {i["MASTER_PORT"] for i in infos} == {str(group.master_port)}
    assert all(i["MASTER_ADDR"] == "127.0.0.1" and i["TOY_FLAG"] == "on" for i in infos)
    assert group.call_rank0("rank_info")["rank"] == 0
    if not os.environ.get("OMP_NUM_THREADS"):  # each rank gets its share of the cores, not all of them
        assert {i["threads"] for i in infos} == {max(1, len(os.sched_getaffinity(0)) // 3)}  # 2 ranks + controller


def test_call_sharded_pads_splits_in_rank_order_and_unpads(group):
    out = group.call_sharded("double", five_rows())
    assert out["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert list(out["uid"]) == list("abcde")
    assert out["rank"].tolist() == [0, 0, 0, 1, 1]  # 5 rows padded to 6 -> 3 per rank, the pad row dropped


def test_call_sharded_rejects_outputs_that_change_the_row_count(group):
    with pytest.raises(ValueError, match="returned 1 rows for a shard of 3"):
        group.call_sharded("wrong_rows", five_rows())


def test_call_sharded_metrics_reduces_by_name(group):
    metrics = group.call_sharded_metrics("metrics", five_rows())
    # shards: rank 0 gets x=[0,1,2] (mean 1), rank 1 gets [3,4,0] (pad row copies row 0; mean 7/3)
    assert metrics["loss"] == pytest.approx((1.0 + 7.0 / 3.0) / 2)
    assert metrics["grad_norm/max"] == 1.0
    assert metrics["ratio/min"] == 0.0


def test_train_step_all_reduces_across_the_group(group):
    batch = Batch(tensors={"x": torch.arange(4, dtype=torch.float32)})
    assert group.call_all("train_step", batch) == [18.0, 18.0]  # 6 * 1 from rank 0 + 6 * 2 from rank 1


def test_worker_exception_is_reraised_with_its_traceback_and_the_group_survives(group):
    with pytest.raises(WorkerError) as info:
        group.call_all("fail", "kaboom")
    err = info.value
    assert (err.role, err.rank, err.method) == ("actor", 0, "fail")
    assert str(err).splitlines()[0] == "actor worker rank 0 failed in fail(): ValueError: kaboom on rank 0"
    assert "ValueError: kaboom on rank 0" in str(err) and "toy_workers.py" in str(err)
    with pytest.raises(WorkerError, match="has no method 'nope'"):
        group.call_rank0("nope")
    assert [i["rank"] for i in group.call_all("rank_info")] == [0, 1]


def test_killed_worker_raises_worker_died_error_promptly_and_stops_the_group(group, capsys):
    critic = LocalWorkerGroup(ToyWorker, {}, world_size=2, role="critic")
    try:
        assert critic.master_port != group.master_port  # two process groups side by side
        batch = Batch(tensors={"x": torch.ones(2)})
        assert critic.call_all("train_step", batch) == [6.0, 6.0]
        assert group.call_all("train_step", batch) == [6.0, 6.0]
        pids = critic.call_all("getpid")
        threading.Timer(1.0, os.kill, (pids[1], signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(WorkerDiedError) as info:
            critic.call_all("sleep", 60)
        assert time.monotonic() - start < 10
        message = str(info.value)
        assert "critic worker rank 1 died during sleep()" in message and "SIGKILL" in message
        assert "rank 1 about to sleep 60s" in message  # the tail of its stderr
        assert "(critic rank 1) rank 1 about to sleep 60s" in capsys.readouterr().err  # echoed live
        assert not any(p.is_alive() for p in critic._procs)  # rank 0 was shut down too
        with pytest.raises(GroupClosedError, match="rank 1 died"):
            critic.call_all("getpid")
    finally:
        critic.shutdown()


def test_factory_failure_is_reported_at_start_up():
    with pytest.raises(WorkerError, match=r"failed in __init__\(\)") as info:
        LocalWorkerGroup(ToyWorker, {"no_such_arg": 1}, world_size=1, role="reward")
    assert "no_such_arg" in str(info.value)


def test_a_failed_start_up_names_the_rank_log_folder_it_keeps():
    """Regression: the folder was only announced after a successful start, so after a failed one the user had
    kept logs (/tmp/hybridrl-<role>-xxxx) and no way to find them."""
    with pytest.raises(WorkerError, match="RuntimeError: rank 1 could not load its model") as info:
        LocalWorkerGroup(Rank1FailsAtStartWorker, {}, world_size=2, role="critic")
    found = re.search(r"\(rank logs kept in (\S+)\)", str(info.value))
    assert found, str(info.value)
    log_dir = found.group(1)
    try:
        assert os.path.basename(log_dir).startswith("hybridrl-critic-")
        with open(os.path.join(log_dir, "rank1.log")) as log:
            assert "rank 1 is loading its model" in log.read()
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def test_one_rank_failing_while_the_other_waits_in_a_collective_shuts_the_group_down():
    # its own group: the failure closes it (the shared one must stay usable whatever order the tests run in)
    with LocalWorkerGroup(ToyWorker, {"scale": 2.0}, world_size=2, role="actor") as group:
        group.error_grace_s = 1.0
        with pytest.raises(WorkerError, match="rank 1 gives up") as info:
            group.call_all("fail_on_rank1_else_all_reduce")
        assert info.value.rank == 1 and "did not answer" in str(info.value)
        assert not any(p.is_alive() for p in group._procs)
        with pytest.raises(GroupClosedError):
            group.call_rank0("getpid")


def test_a_clean_shutdown_removes_the_logs_as_announced_and_reports_no_nanobind_leaks(capsys, caplog):
    """A rank freezes its start-up objects (`build_worker`); frozen at exit, triton's nanobind objects were
    reported as ~30 lines of `nanobind: leaked ...` per rank at the end of every clean multi-rank run."""
    pytest.importorskip("triton")
    group = LocalWorkerGroup(TritonImportingWorker, {}, world_size=2, role="actor_rollout")
    assert f"rank logs in {group.log_dir}, removed at a clean shutdown, kept if a rank dies" in caplog.text
    assert [i["rank"] for i in group.call_all("rank_info")] == [0, 1]
    group.shutdown()  # waits for the ranks to exit, then echoes the rest of their stderr
    assert "leaked" not in capsys.readouterr().err
    assert not os.path.exists(group.log_dir)


@pytest.mark.slow
def test_lines_about_the_role_as_a_whole_are_logged_by_rank_0_only(capsys):
    with LocalWorkerGroup(RoleStartupWorker, {}, world_size=2, role="actor_rollout"):
        pass  # the ranks log while they start; shutting down echoes what is left of their stderr
    err = capsys.readouterr().err
    for line in ("actor: master weights float32", "actor: use_torch_compile applies on CUDA"):
        assert err.count(line) == 1 and f"(actor_rollout rank 0) [hybridrl] {line}" in err, err


def test_gpu_device_ids_without_cuda_fail_before_starting_anything():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only error")
    with pytest.raises(ValueError, match=r"device_ids \[0, 1\] given but no CUDA device is visible"):
        LocalWorkerGroup(ToyWorker, {}, world_size=2, role="actor", device_ids=[0, 1])
    with pytest.raises(ValueError, match="has 1 entries for world_size 2"):
        LocalWorkerGroup(ToyWorker, {}, world_size=2, role="actor", device_ids=[0])


def test_a_factory_spawned_processes_cannot_import_is_a_clear_error():
    with pytest.raises(TypeError, match="use a top-level class or function"):
        LocalWorkerGroup(lambda: ToyWorker(), {}, world_size=1, role="actor")


def _report_visible_devices(queue) -> None:
    queue.put(os.environ.get("CUDA_VISIBLE_DEVICES"))


def test_rank_processes_start_with_their_gpu_already_visible(monkeypatch):
    """Regression: CUDA_VISIBLE_DEVICES was set inside the rank after start-up, too late when anything had
    touched CUDA first, so both ranks of a 2-GPU group ran on GPU 0. It must be in the environment the
    process starts with (and the parent's environment restored)."""
    import multiprocessing as mp

    from hybridrl.distributed.local_launcher import _child_environment

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with _child_environment("5"):
        proc = ctx.Process(target=_report_visible_devices, args=(queue,))
        proc.start()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert queue.get(timeout=60) == "5"
    proc.join(timeout=60)
    with _child_environment(None):  # CPU ranks: nothing changes
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_ranks_leave_sigint_and_sigterm_to_their_controller_which_kills_them_when_it_aborts():
    """Ctrl-C reaches the whole foreground process group and Slurm signals every process of a job: a rank keeps
    serving (the controller finishes the step and stops it); the controller's own abort ends ranks at once."""
    group = LocalWorkerGroup(ToyWorker, {}, world_size=1, role="signalled")
    try:
        (pid,) = group.pids
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)
        assert group.call_all("getpid") == [pid]  # still serving
        with open(group.log_path(0)) as f:
            assert f"SIGTERM ignored by this rank: its controller (pid {os.getpid()}) finishes the step" in f.read()
        group._abort("test", keep_logs=False)  # SIGKILL: a SIGTERM from the controller would be ignored
        assert group._procs[0].exitcode == -signal.SIGKILL and not os.path.exists(group.log_dir)
    finally:
        group.shutdown()
