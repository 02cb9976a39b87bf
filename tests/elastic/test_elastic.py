"""Elastic rollout: grow generation onto more devices at runtime and give them back, between steps.

The end-to-end test runs the trainer as a real subprocess (one process, hybrid engine), grows the
rollout onto CPU "device" 1 (a spawned replica process) with `hybridrl control` after step 1, shrinks it
again with a bare SIGUSR2, and checks that the run trains exactly as one that never changed: the
engine keys its sampling noise by global row, so splitting the prompts between the trainer's own
rollout and the replica samples the same tokens (a float tolerance, as in test_multi_process, because
the replica's matmuls run in another process with its own thread count).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.config.run_plan import build_run_plan
from hybridrl.distributed import InProcessGroup, WorkerDiedError, num_visible_devices
from hybridrl.rollout import SamplingParams
from hybridrl.checkpoint.pid_file import PidRecord, process_identity, read_pid_file
from hybridrl.elastic.control import (
    PID_FILE,
    ElasticController,
    Request,
    _ignored,
    main_control,
    write_request,
)
from hybridrl.distributed.weight_sync import WeightHandoff
from hybridrl.elastic.rollout import ElasticPlacement, RolloutElasticity, grow_devices, placement_of
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.batch import Batch
from hybridrl.workers.colocated import ROLLOUT_METRICS_META, ROW_INDEX_KEY
from hybridrl.workers.rollout_group import GroupRollout
from tests.trainer.helpers import tiny_run_overrides
from tests.trainer.test_multi_process import assert_same_metrics
from tests.trainer.test_ppo_trainer import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


GATED_REWARD = """
import os, time

_calls = [0]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, gate=None):
    # A shaped score (varies within a prompt's group, so GRPO updates the actor every step). With `gate`,
    # the rows of step s are scored only once the file there says s or more: the test holds the trainer mid-step.
    step = _calls[0] // 32 + 1  # 8 prompts x n=4 rows per step, no validation
    _calls[0] += 1
    while gate is not None and step > _allowed(gate):
        time.sleep(0.01)
    return sum(c in "13579" for c in solution_str) / max(len(solution_str), 1)


def _allowed(gate):
    try:
        with open(gate) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0
"""


def run_overrides(model_dir, files, out_dir, steps: int, extra: list[str] = (), reward: str | None = None) -> list[str]:
    base = [o for o in tiny_run_overrides(model_dir, files, out_dir, algo="grpo", steps=steps)
            if o not in ("actor_rollout_ref.rollout.name=hf", "trainer.logger=[file]")]
    rewards = [f"custom_reward_function.path={reward}"] if reward else []
    return base + rewards + ["actor_rollout_ref.rollout.name=hybrid", "actor_rollout_ref.rollout.dtype=float32",
                             "actor_rollout_ref.actor.ppo_mini_batch_size=8", "trainer.logger=[console,file]"] \
        + list(extra)


def wait_for(condition, what: str, proc: subprocess.Popen, log_path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(log_path) as f:
                pytest.fail(f"gave up waiting for {what} (trainer exit code {proc.poll()}); its output:\n{f.read()}")
        time.sleep(0.02)


def steps_logged(out_dir: str) -> int:
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.endswith("\n"))


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def open_gate(gate: str, step: int) -> None:
    with open(f"{gate}.tmp", "w") as f:
        f.write(str(step))
    os.replace(f"{gate}.tmp", gate)


@pytest.mark.slow
@pytest.mark.skipif(num_visible_devices("cpu") < 2, reason="growing onto CPU device 1 needs 2 visible cores")
def test_grow_and_shrink_a_running_trainer_changes_nothing_but_the_devices(tmp_path, arith_model_dir,
                                                                          arithmetic_files, plain_run):
    """Steps 1-2 on the trainer's own rollout, 3-4 also on a borrowed replica (its weights: the current ones
    at the join, then re-synced after step 3's update), 5 on its own again. The gated reward holds the
    trainer inside a step while the test signals, so each request lands at a known step boundary."""
    out, log_path, gate = str(tmp_path / "run"), str(tmp_path / "trainer.log"), str(tmp_path / "gate")
    reward = tmp_path / "gated_reward.py"
    reward.write_text(GATED_REWARD)
    open_gate(gate, 1)
    args = run_overrides(arith_model_dir, arithmetic_files, out, steps=5, reward=str(reward),
                         extra=[f"+custom_reward_function.reward_kwargs.gate={gate}"])
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "hybridrl.trainer.main_ppo", *args], cwd=REPO,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log_file, stderr=subprocess.STDOUT)

    def logged(text: str):
        return lambda: text in read(log_path)

    try:
        wait_for(lambda: steps_logged(out) >= 1, "step 1 in metrics.jsonl", proc, log_path)  # step 2 is held
        assert read_pid_file(os.path.join(out, PID_FILE)).pid == proc.pid
        assert main_control([out, "grow-rollout", "--devices", "1"]) == 0  # request file + SIGUSR1
        wait_for(logged("received SIGUSR1 (grow-rollout); applied at the next step boundary"), "the receipt", proc,
                 log_path)
        assert "growing the rollout" not in read(log_path)  # logged at once, applied between steps
        open_gate(gate, 2)
        wait_for(logged("rollout grown to 2 devices: [0, 1]"), "the growth", proc, log_path)
        open_gate(gate, 3)
        wait_for(lambda: steps_logged(out) >= 3, "step 3 in metrics.jsonl", proc, log_path)  # step 4 is held
        os.kill(proc.pid, signal.SIGUSR2)  # bare: return everything borrowed
        wait_for(logged("received SIGUSR2 (shrink-rollout)"), "the receipt", proc, log_path)
        open_gate(gate, 99)
        assert proc.wait(timeout=120) == 0, read(log_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = read(log_path)
    assert "rollout shrunk to 1 device: [0] (returned [1]; SIGUSR2)" in output
    assert not os.path.exists(os.path.join(out, PID_FILE)) and os.listdir(os.path.join(out, "control")) == []

    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]  # every step exactly once
    assert [r["perf/rollout_num_devices"] for r in records] == [1, 1, 2, 2, 1]
    assert all(r["actor/grad_norm"] > 0 for r in records)  # the actor changes every step, so stale weights
    assert all(r["training/rollout_probs_diff_mean"] < 1e-5 for r in records)  # on the replica would show here

    for got, want in zip(records, plain_run, strict=True):
        assert_same_metrics(got, want)  # scores, prompt/response lengths, losses: the same data in the same order


@pytest.mark.slow
def test_bare_signals_grow_a_rollout_group_onto_the_actors_device(tmp_path, arith_model_dir, arithmetic_files,
                                                                  plain_run):
    """2 gloo ranks: actor on rank 0, rollout on rank 1. A bare SIGUSR1 lends the actor's device to the
    rollout (a replica there, time-sharing with training; weights gathered by the actor's group), SIGUSR2
    returns it; the run trains as one process does."""
    out = str(tmp_path)
    reward = tmp_path / "reward.py"
    reward.write_text(GATED_REWARD)
    trainer = PPOTrainer(load_config(run_overrides(
        arith_model_dir, arithmetic_files, out, steps=5, reward=str(reward),
        extra=["trainer.logger=[file]", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.device_ids=[0]",
               "actor_rollout_ref.rollout.device_ids=[1]"])))
    score, calls = trainer.roles.reward.compute_scores, []

    def score_and_signal(batch, **kwargs):
        calls.append(1)
        if len(calls) in (1, 3):
            os.kill(os.getpid(), signal.SIGUSR1 if len(calls) == 1 else signal.SIGUSR2)
        return score(batch, **kwargs)

    trainer.roles.reward.compute_scores = score_and_signal
    trainer.fit()
    records = read_metrics(out)
    assert [r["perf/rollout_num_devices"] for r in records] == [1, 2, 2, 1, 1]
    assert all(r["training/rollout_probs_diff_mean"] < 1e-5 for r in records)
    for got, want in zip(records, plain_run, strict=True):
        assert_same_metrics(got, want)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory, arith_model_dir, arithmetic_files) -> list[dict]:
    """The elastic tests' run in one process, never changed (ungated reward)."""
    root = tmp_path_factory.mktemp("plain")
    reward, out = root / "reward.py", str(root / "run")
    reward.write_text(GATED_REWARD)
    PPOTrainer(load_config(run_overrides(arith_model_dir, arithmetic_files, out, steps=5, reward=str(reward),
                                         extra=["trainer.logger=[file]"]))).fit()
    return read_metrics(out)


def test_refused_requests_are_logged_and_training_goes_on(tmp_path, arith_model_dir, arithmetic_files, caplog,
                                                          capfd):
    out = str(tmp_path)
    previous = signal.getsignal(signal.SIGUSR1)
    trainer = PPOTrainer(load_config(run_overrides(arith_model_dir, arithmetic_files, out, steps=3,
                                                   extra=["trainer.logger=[file]"])))
    assert signal.getsignal(signal.SIGUSR1) == trainer.signals.control._on_signal  # taken from construction on
    score, calls = trainer.roles.reward.compute_scores, []

    def score_and_signal(batch, **kwargs):  # runs mid-step: requests wait for the step boundary
        calls.append(1)
        if len(calls) == 1:
            assert main_control([out, "grow-rollout", "--devices", "99"]) == 0  # out of range
            os.kill(os.getpid(), signal.SIGUSR2)  # nothing borrowed to return
        elif len(calls) == 2:
            os.kill(os.getpid(), signal.SIGUSR1)  # default growth: the actor's device, which the rollout has
        return score(batch, **kwargs)

    trainer.roles.reward.compute_scores = score_and_signal
    trainer.fit()
    # handlers restored (the default action, which would end the process on a late request, becomes a line)
    assert signal.getsignal(signal.SIGUSR1) is (_ignored if previous in (signal.SIG_DFL, None) else previous)
    assert not os.path.exists(os.path.join(out, PID_FILE))
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["perf/rollout_num_devices"] == 1 for r in records)
    messages = caplog.text
    assert "rollout grow request (" in messages and "refused: devices [99] out of range: " in messages
    assert "rollout shrink request (SIGUSR2) refused: nothing borrowed to return; training goes on" in messages
    assert ("rollout grow request (SIGUSR1) refused: no devices left to grow onto: the actor's devices [0] are "
            "already used by the rollout") in messages
    assert capfd.readouterr().err.count("received SIGUSR") == 3
    assert os.listdir(os.path.join(out, "control")) == []  # the request file was consumed


# ---------------------------------------------------------------- the control command and requests
def test_control_writes_the_request_and_signals_the_pid(tmp_path, capsys):
    run_dir = str(tmp_path)
    controller = ElasticController(run_dir)
    assert controller.install()  # this process plays the trainer
    try:
        assert read_pid_file(os.path.join(run_dir, PID_FILE)) == PidRecord(os.getpid(), process_identity(os.getpid()))
        assert main_control([run_dir, "grow-rollout", "--devices", "2,3"]) == 0
        assert "sent grow-rollout (devices: [2, 3]) to the trainer" in capsys.readouterr().out
        (name,) = os.listdir(os.path.join(run_dir, "control"))
        assert json.loads(read(os.path.join(run_dir, "control", name))) == {"action": "grow", "devices": [2, 3]}
        write_request(run_dir, "shrink", None)  # a file whose signal has not arrived yet: left for later
        assert controller.pending() == [Request("grow", (2, 3), name)]
        assert len(os.listdir(os.path.join(run_dir, "control"))) == 1
        os.kill(os.getpid(), signal.SIGUSR2)
        assert [(r.action, r.devices) for r in controller.pending()] == [("shrink", None)]
        os.kill(os.getpid(), signal.SIGUSR1)  # bare: the default growth
        assert controller.pending() == [Request("grow", None, "SIGUSR1")]
        assert controller.pending() == []
    finally:
        controller.close()
    assert not os.path.exists(os.path.join(run_dir, PID_FILE))
    assert main_control([run_dir, "shrink-rollout"]) == 1  # no trainer running now


def test_control_refuses_a_stale_pid_file(tmp_path, capsys):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    with open(tmp_path / PID_FILE, "w") as f:
        f.write(done.stdout)
    assert main_control([str(tmp_path), "grow-rollout"]) == 1
    assert "is not running; the pid file is stale" in capsys.readouterr().err
    assert not (tmp_path / "control").exists() or os.listdir(tmp_path / "control") == []
    with pytest.raises(SystemExit):
        main_control([str(tmp_path), "grow-rollout", "--devices", "a,b"])


@pytest.fixture
def unrelated_process():
    """A live process that is no trainer (what the audit's `hybridrl control` killed)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("identity", ["its own (another process's)", "none (an earlier version's file)"])
def test_control_refuses_a_pid_file_naming_an_unrelated_live_process(tmp_path, capsys, unrelated_process, identity):
    """The pid file names a live process that did not write it: a reused pid (the identity in the file is the
    trainer's, not the process's) or a file without an identity. Nothing is sent; the process lives on."""
    pid = unrelated_process.pid
    trainer_identity = process_identity(os.getpid())  # this process plays the trainer that wrote the file and left
    lines = f"{pid}\n{trainer_identity}\n" if identity.startswith("its own") else f"{pid}\n"
    (tmp_path / PID_FILE).write_text(lines)
    assert main_control([str(tmp_path), "grow-rollout"]) == 1
    err = capsys.readouterr().err
    if identity.startswith("its own"):
        assert f"pid {pid} in {tmp_path / PID_FILE} is not this run's trainer: the process running under that pid " \
               "started at another time than the one that wrote the file" in err
    else:
        assert f"names pid {pid} without the trainer's start time" in err and f"kill -USR1 {pid}" in err
    assert "nothing was sent" in err
    time.sleep(0.2)
    assert unrelated_process.poll() is None  # not signalled (SIGUSR1's default action would have ended it)
    assert not (tmp_path / "control").exists() or os.listdir(tmp_path / "control") == []


def test_usr_signals_outside_a_run_are_ignored_with_a_line(capfd):
    """What the command line installs before the trainer exists, and what fit() leaves behind: a line, no exit."""
    from hybridrl.elastic.control import ignore_control_signals

    previous = {number: signal.getsignal(number) for number in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        for number in previous:
            signal.signal(number, signal.SIG_DFL)
        ignore_control_signals()
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.05)  # delivered at the next bytecode
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    err = capfd.readouterr().err
    assert err.count("while no training runs (starting up or finished): ignored") == 2


# ---------------------------------------------------------------- placement rules and the split, no processes
SPLIT = ElasticPlacement("cuda", 4, rollout=(1,), actor=(0,), critic_only=(2,))


@pytest.mark.parametrize("placement, borrowed, wanted, expected", [
    (SPLIT, [], None, [0]),  # default: the actor's devices, time-shared with training
    (SPLIT, [0], None, "no devices left to grow onto"),
    (SPLIT, [], (3, 3), [3]),
    (SPLIT, [], (0, 4), "devices [4] out of range: 4 GPUs visible, ids 0..3"),
    (SPLIT, [3], (3,), "devices [3] are already used by the rollout (now on [1, 3])"),
    (SPLIT, [], (2,), "devices [2] are the critic's"),
    (ElasticPlacement("cpu", 2, (0, 1), (0, 1), (), refusal="needs the local launcher"), [], (5,),
     "needs the local launcher"),
])
def test_grow_devices(placement, borrowed, wanted, expected):
    got = grow_devices(placement, borrowed, wanted)
    assert got == expected if isinstance(expected, list) else expected in got


@pytest.mark.parametrize("overrides, ranks, launcher, rollout, refusal", [
    ([], 1, "in_process", (0,), None),
    (["trainer.launcher=ray"], 1, "ray", (0,), "needs the local launcher"),  # a one-rank Ray group: replicas elsewhere
    (["actor_rollout_ref.actor.device_ids=[0,1]", "actor_rollout_ref.rollout.device_ids=[2]"], 3, "local", (2,), None),
    (["actor_rollout_ref.actor.device_ids=[1]"], 2, "local", (1,), None),  # a null rollout list is the actor's
])
def test_placement_of_reads_the_lists_and_the_launcher(overrides, ranks, launcher, rollout, refusal):
    cfg = load_config(overrides)
    placement = placement_of(build_run_plan(cfg, device="cpu", world_size=ranks, launcher=launcher))
    assert placement.rollout == rollout
    assert placement.refusal is None if refusal is None else refusal in placement.refusal


class FakeRollout:
    """In-process rollout whose "response" is each row's sampling key: the global row index."""

    def generate_sequences(self, prompts: Batch, params: SamplingParams):
        rows = prompts.repeat(params.n, interleave=True)
        rows["responses"] = torch.arange(len(rows)) + params.row_offset
        return rows, {"rollout/rows": float(len(rows))}


class FakeReplica:
    """What ColocatedWorker does with a shard (pops the global row index), plus a switch to fail."""

    def __init__(self):
        self.fail, self.weights, self.peak_gb = False, None, 0.0

    def pop_phase_metrics(self) -> dict:
        return {"perf/max_memory_allocated_gb": self.peak_gb, "perf/max_memory_allocated_gb/gen": self.peak_gb / 2}

    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> Batch:
        if self.fail:
            raise WorkerDiedError("rollout_borrowed", 0, "generate_sequences", "killed by SIGKILL")
        offset = int(prompts.pop(ROW_INDEX_KEY)[0])
        batch, metrics = FakeRollout().generate_sequences(prompts, replace(params, row_offset=offset))
        batch.meta[f"{ROLLOUT_METRICS_META}0"] = metrics
        return batch

    def load_rollout_weights(self, weights):
        self.weights = dict(weights.open())  # a handoff payload, as ColocatedWorker opens it


class FakeActorRank(FakeReplica):
    """The run's own rank: the actor (its weights) beside a rollout replica."""

    def __init__(self, actor_weights: dict):
        super().__init__()
        self.actor = actor_weights

    def sync_rollout_weights(self) -> None:
        self.weights = dict(self.actor)

    def actor_weights(self, dtype=None) -> dict:
        return dict(self.actor)


def test_replicas_generate_their_slice_and_a_failed_one_is_returned(caplog):
    replicas: dict[int, FakeReplica] = {}

    def start(device):
        replicas[device] = FakeReplica()
        return InProcessGroup(replicas[device], role=f"rollout_borrowed{device}")

    weights = {"w": torch.ones(2)}
    own = FakeActorRank(weights)
    group = InProcessGroup(own, role="actor_rollout")
    rollout = GroupRollout(group, group, WeightHandoff("pickle", None), device_ids=(0,))
    elastic = RolloutElasticity(rollout, ElasticPlacement("cpu", 4, (0,), (0,), ()), start)
    prompts = Batch({"input_ids": torch.arange(10).unsqueeze(1)})
    params = SamplingParams(n=3, seed=1)
    alone, _ = rollout.generate_sequences(prompts, params)
    elastic.apply(Request("grow", (2, 3), "test"))
    assert rollout.devices == [0, 2, 3] and replicas[2].weights["w"].equal(weights["w"])  # current weights loaded
    grown, metrics = rollout.generate_sequences(prompts, params)
    assert grown["responses"].equal(alone["responses"]) and grown["input_ids"].equal(alone["input_ids"])
    assert metrics["rollout/rows"] == 10  # 30 rows over 3 devices, pooled
    replicas[2].peak_gb, replicas[3].peak_gb = 3.0, 5.0  # borrowed ranks report their peaks; the max is kept
    assert rollout.replica_phase_metrics() == {"perf/max_memory_allocated_gb": 5.0,
                                               "perf/max_memory_allocated_gb/gen": 2.5}
    own.actor = {"w": torch.zeros(2)}  # an update
    rollout.sync_weights()
    assert replicas[3].weights["w"].equal(torch.zeros(2)) and own.weights["w"].equal(torch.zeros(2))
    replicas[2].fail = True
    failed, _ = rollout.generate_sequences(prompts, params)
    assert failed["responses"].equal(alone["responses"]) and rollout.devices == [0, 3]
    assert "rollout replica on device 2 returned: it failed while generating (WorkerDiedError" in caplog.text
    elastic.apply(Request("shrink", (0,), "test"))
    assert "the rollout's own [0] are never returned" in caplog.text and rollout.devices == [0, 3]
    elastic.apply(Request("shrink", None, "test"))
    assert rollout.devices == [0] and "rollout shrunk to 1 device: [0]" in caplog.text
    assert rollout.replica_phase_metrics() == {}
