"""The actor → rollout weight handoff between worker groups on one node (real gloo processes, tiny model).

Actor on 2 ranks (FSDP2: rank 0 writes what the ranks gather together), rollout on a rank of its own
(several readers of one buffer: the elastic trainer tests, a rollout group plus a borrowed replica). The rollout is the hf backend, whose replica's weights can
be compared with the actor's by name; the handoff casts to bf16 while the replica is fp32, so the
replica must hold exactly the actor's weights rounded to bf16.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.config.run_plan import build_run_plan
from hybridrl.distributed import LocalWorkerGroup, WorkerDiedError
from hybridrl.distributed.weight_sync import WeightHandoff
from hybridrl.workers.rollout_group import GroupRollout
from tests.distributed.handoff_workers import InspectableWorker
from tests.trainer.helpers import tiny_run_overrides

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(cfg, roles: tuple[str, ...], ranks: int, name: str) -> LocalWorkerGroup:
    plan = build_run_plan(cfg, device="cpu", world_size=1, launcher="local")  # what the ranks read: device, backend
    return LocalWorkerGroup(InspectableWorker, {"cfg": cfg, "plan": plan, "total_steps": 2, "roles": roles},
                            world_size=ranks, role=name)


@pytest.fixture(scope="module")
def cfg(tmp_path_factory, arith_model_dir, arithmetic_files):
    return load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path_factory.mktemp("run"))))


@pytest.fixture(scope="module")
def groups(cfg):
    with ThreadPoolExecutor(2) as pool:  # the ranks start side by side
        actor, rollout = pool.submit(start, cfg, ("actor",), 2, "actor"), pool.submit(start, cfg, ("rollout",), 1, "rollout")
        actor, rollout = actor.result(), rollout.result()
    yield actor, rollout
    actor.shutdown()
    rollout.shutdown()


def assert_rollout_holds(rollout: LocalWorkerGroup, actor: LocalWorkerGroup, dtype: torch.dtype) -> None:
    want = actor.call_all("actor_weights")[0]  # the actor's full weights as trained (fp32)
    for rank, got in enumerate(rollout.call_all("rollout_weights")):
        assert set(want) <= set(got)
        for name, tensor in want.items():
            assert torch.equal(got[name], tensor.to(dtype).to(got[name].dtype)), (rank, name)


def test_a_handoff_gives_every_rollout_rank_the_actors_weights_in_the_rollout_dtype(groups):
    actor, rollout = groups
    handoff = WeightHandoff("shared_memory", torch.bfloat16)
    try:
        for factor in (1.37, 0.81):  # twice: the second step rewrites the same buffer
            actor.call_all("scale_actor", factor)
            metrics = GroupRollout(rollout, actor, handoff).sync_weights()
            assert_rollout_holds(rollout, actor, torch.bfloat16)
        want_bytes = sum(t.numel() * 2 for t in actor.call_all("actor_weights")[0].values())
        assert metrics["perf/update_weights_shared_memory"] == 1.0
        assert want_bytes <= metrics["perf/update_weights_gb"] * 1e9 < want_bytes + 64 * 64  # bf16 + alignment
        assert os.path.getsize(handoff.path) == metrics["perf/update_weights_gb"] * 1e9
    finally:
        handoff.close()
    assert not os.path.exists(handoff.path)


def test_a_buffer_over_the_limit_falls_back_to_pickling_and_says_so(groups, caplog):
    actor, rollout = groups
    handoff = WeightHandoff("shared_memory", torch.bfloat16, max_bytes=1024)
    try:
        actor.call_all("scale_actor", 1.11)
        metrics = GroupRollout(rollout, actor, handoff).sync_weights()
        assert_rollout_holds(rollout, actor, torch.bfloat16)
        assert metrics["perf/update_weights_shared_memory"] == 0.0 and metrics["perf/update_weights_gb"] > 0
        assert "shared-memory weight handoff not possible: the weights need " in caplog.text
        assert "only 1.0 KiB are available" in caplog.text and "sending the weights pickled" in caplog.text
        assert not os.path.exists(handoff.path)
        caplog.clear()
        GroupRollout(rollout, actor, handoff).sync_weights()  # known too big: no second attempt,
        assert "not possible" not in caplog.text and not os.path.exists(handoff.path)  # nor a second warning
    finally:
        handoff.close()


def test_ray_hands_weights_over_pickled(groups):
    actor, rollout = groups
    handoff = WeightHandoff("pickle", torch.bfloat16)
    actor.call_all("scale_actor", 0.9)
    metrics = GroupRollout(rollout, actor, handoff).sync_weights()
    assert handoff.path is None and metrics["perf/update_weights_shared_memory"] == 0.0
    assert_rollout_holds(rollout, actor, torch.bfloat16)


def test_the_buffer_is_removed_when_the_writer_died(cfg, groups):
    _, rollout = groups
    actor = start(cfg, ("actor",), 1, "actor_doomed")
    handoff = WeightHandoff("shared_memory", torch.bfloat16)
    try:
        GroupRollout(rollout, actor, handoff).sync_weights()
        assert os.path.exists(handoff.path)
        os.kill(actor.pids[0], signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match="actor_doomed worker rank 0 died"):
            GroupRollout(rollout, actor, handoff).sync_weights()
    finally:
        handoff.close()  # what the trainer's shutdown does on its way out
        actor.shutdown()
    assert not os.path.exists(handoff.path)


def test_an_in_process_actors_buffer_is_removed_at_interpreter_exit(tmp_path):
    """One process (elastic replicas of a one-process run): the actor's group is in the controller's process, so
    the controller writes; exiting removes the buffer."""
    script = textwrap.dedent(f"""
        import torch
        from hybridrl.distributed import InProcessGroup
        from hybridrl.distributed.weight_handoff import write_weights
        from hybridrl.distributed.weight_sync import WeightHandoff

        class Actor:
            def write_actor_weights(self, spec):
                return write_weights([("w", torch.ones(1000)), ("b", torch.zeros(3))], spec)

        handoff = WeightHandoff("shared_memory", torch.bfloat16, directory={str(tmp_path)!r})
        manifest = handoff.gather(InProcessGroup(Actor(), role="actor"))
        assert manifest.nbytes == 2048 + 6 and handoff.metrics()["perf/update_weights_shared_memory"] == 1.0
        print(handoff.path)
    """)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, cwd=REPO)
    path = out.stdout.strip()
    assert path.startswith(str(tmp_path)) and not os.path.exists(path)
