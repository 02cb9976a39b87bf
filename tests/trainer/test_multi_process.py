"""The trainer on 2 CPU ranks (gloo, FSDP2): same metrics as one process, Ray, a killed rank, resume across sizes.

Why the runs are comparable: generation uses the hybrid engine, whose sampling noise is keyed by
(seed, global row) — each rank generates a contiguous shard of the repeated prompts and keys its rows
by their index in the whole batch, so the shards sample exactly what one process samples (the hf
backend draws from one RNG stream per call, so its shards could not). One mini-batch per step
(`ppo_mini_batch_size` = `train_batch_size`) with `shuffle=false` makes both runs take the same
optimizer steps. Each micro-batch's loss is weighted by its share of the whole mini-batch's tokens
(loss_agg_scope=mini_batch), so one process accumulating 4 micro-batches and 2 ranks accumulating 2 each
(balance_batch regrouping the rows), averaged over the ranks, add up the same terms in another order:
hence a float tolerance rather than equality. The critic's fresh value head is seeded identically.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal

import pytest
import torch

from hybridrl.checkpoint.manager import load_role
from hybridrl.config import load_config
from hybridrl.distributed import WorkerDiedError
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics

COMPARABLE = [
    "actor_rollout_ref.rollout.name=hybrid", "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8", "critic.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.1",
    "trainer.balance_batch=true",  # regroups rows into other micro-batches: the losses are mini-batch means
]
OFFLOADS = [f"{role}.fsdp_config.{what}_offload=true" for role, what in (
    ("actor_rollout_ref.actor", "param"), ("actor_rollout_ref.actor", "optimizer"), ("actor_rollout_ref.ref", "param"),
    ("critic.model", "param"), ("critic.model", "optimizer"))]
# Balancing puts rows into other micro-batches on 2 ranks: the same sums in another order, so after two Adam
# steps a weight may differ by ~1.5e-6 (not 1e-6) from one process.
WEIGHT_ATOL = 5e-6
VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/", "rollout/", "global_seqlen/")  # speed; per rank


def overrides(model_dir, files, out_dir, *, ranks: int, steps: int, extra: list[str] = (),
              engine: str = "hybrid") -> list[str]:
    base = [o for o in tiny_run_overrides(model_dir, files, out_dir, algo="gae", steps=steps)
            if o != "actor_rollout_ref.rollout.name=hf"]
    comparable = [o for o in COMPARABLE if engine == "hybrid" or not o.startswith("actor_rollout_ref.rollout.")]
    return base + comparable + [f"actor_rollout_ref.rollout.name={engine}", f"trainer.n_gpus_per_node={ranks}"] \
        + list(extra)


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(VOLATILE) and "time" not in k}


def assert_same_metrics(got: dict, want: dict) -> None:
    got, want = comparable(got), comparable(want)
    assert set(got) == set(want), set(got) ^ set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (got["step"], key)


def copy_checkpoint(src_dir: str, step: int, dst_dir: str) -> None:
    """Only global_step_<step> and a tracker pointing at it (not the source's metrics log)."""
    os.makedirs(dst_dir)
    shutil.copytree(os.path.join(src_dir, f"global_step_{step}"), os.path.join(dst_dir, f"global_step_{step}"))
    with open(os.path.join(dst_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(step))


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory, arith_model_dir, arithmetic_files) -> tuple[str, list[dict]]:
    """3 steps in one process, a checkpoint after each."""
    out = str(tmp_path_factory.mktemp("one_process"))
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=1, steps=3,
                                     extra=["trainer.save_freq=1"]))).fit()
    return out, read_metrics(out)


def test_two_ranks_give_the_metrics_of_one_process(tmp_path, arith_model_dir, arithmetic_files, one_process_run):
    _, expected = one_process_run
    out = str(tmp_path)
    profile = os.path.join(out, "profile")  # profiling step 2 must not change its metrics either
    trainer = PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=2, extra=[
        "global_profiler.tool=torch", "global_profiler.steps=[2]", f"global_profiler.save_path={profile}"])))
    assert trainer.plan.on_ranks and trainer.plan.world_size == 2
    # Memory: each rank reports its own peak (CPU: its resident set), the controller takes the max;
    # the controller itself measures nothing (on GPUs it would otherwise open a CUDA context).
    assert not trainer.memory.enabled
    assert trainer.roles.groups.phase_metrics()["perf/max_memory_allocated_gb"] > 0.05  # torch + a model
    trainer.fit()
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["actor/grad_norm"] > 0  # a real update, so step 2 generates with synced weights:
    assert records[1]["training/rollout_probs_diff_mean"] < 1e-5  # the replicas' log-probs are the actor's
    for got, want in zip(records, expected):
        assert_same_metrics(got, want)
    for phase in ("gen", "ref", "update_actor", "update_weights", "update_critic"):  # the slowest rank's share
        assert all(0 < r[f"timing_s/{phase}_rank"] <= r[f"timing_s/{phase}"] for r in records), phase
        assert all(0 < r[f"timing_s/{phase}_rank_min"] <= r[f"timing_s/{phase}_rank"] for r in records), phase
    assert all(r["timing_s/gc"] >= 0 and r["timing_s/gc_rank"] >= r["timing_s/gc_rank_min"] >= 0 for r in records)
    group = trainer.roles.groups.by_name["actor_rollout_ref"]
    assert not any(p.is_alive() for p in group._procs)  # fit() stopped the ranks
    assert sorted(os.listdir(profile)) == ["step_2"]
    for process in ("controller", "rank0", "rank1"):  # every process of the run, the same step
        assert os.path.exists(os.path.join(profile, "step_2", f"{process}.trace.json.gz")), process
    with open(os.path.join(profile, "step_2", "rank1.txt")) as f:
        assert "phase/update_actor" in f.read()


def test_two_ranks_splitting_each_sequence_give_the_metrics_of_one_process(tmp_path, arith_model_dir,
                                                                         arithmetic_files, one_process_run):
    """Ulysses sequence parallelism over both ranks (one group: the actor, reference and critic each see the whole
    batch, every sequence split in two) trains as one process does; generation still runs a replica per rank."""
    _, expected = one_process_run
    out = str(tmp_path)
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=2, extra=[
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "critic.ulysses_sequence_parallel_size=2"]))).fit()
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2]
    for got, want in zip(records, expected):
        assert_same_metrics(got, want)


@pytest.mark.slow
def test_balanced_batches_give_ranks_closer_token_counts(tmp_path, arith_model_dir, arithmetic_files):
    """trainer.balance_batch (verl's default): rows are reordered so each rank's contiguous share carries a
    similar token count; verl's global_seqlen/* metrics report the split before and after."""
    out = str(tmp_path)
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=2,
                                     extra=["trainer.balance_batch=true"]))).fit()
    records = read_metrics(out)
    spread = [r["global_seqlen/balanced_max"] - r["global_seqlen/balanced_min"] for r in records]
    assert any(after < r["global_seqlen/minmax_diff"] for after, r in zip(spread, records))  # step 2: 4 -> 2 tokens
    for r in records:
        assert r["global_seqlen/balanced_max"] - r["global_seqlen/balanced_min"] <= r["global_seqlen/minmax_diff"]
        assert r["global_seqlen/balanced_min"] <= r["global_seqlen/mean"] <= r["global_seqlen/balanced_max"]
        assert math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["critic/vf_loss"])


def test_tensor_parallel_rollout_and_hybrid_sharding_give_the_metrics_and_checkpoint_of_one_process(
        tmp_path, arith_model_dir, arithmetic_files, one_process_run):
    """Two ranks, one engine replica split across both (rollout.tensor_model_parallel_size=2): the actor syncs
    full weights, each rank loads its slices, both generate every row; the first rank answers. The actor and
    reference keep whole replicas (fsdp_size=1: plain modules, no parameter all-gathers, gradients
    averaged before each optimizer step); the critic shards over both ranks and keeps gathered weights from forward to
    backward (reshard_after_forward=false). Every role's parameters and optimizer state are offloaded
    between its phases. Saved states are the one-process format."""
    one_dir, expected = one_process_run
    out = str(tmp_path)
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=2, extra=[
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=1", "actor_rollout_ref.ref.fsdp_config.fsdp_size=1",
        "critic.model.fsdp_config.reshard_after_forward=false", "trainer.save_freq=2", *OFFLOADS]))).fit()
    records = read_metrics(out)
    assert records[1]["training/rollout_probs_diff_mean"] < 1e-5  # synced slices give the actor's log-probs
    for got, want in zip(records, expected):
        assert_same_metrics(got, want)
    assert_same_states(out, one_dir, step=2)


def assert_same_states(out: str, one_dir: str, step: int) -> None:
    """The actor's and critic's saved weights and Adam moments equal the one-process run's."""
    for role in ("actor", "critic"):
        got = load_role(os.path.join(out, f"global_step_{step}", role), ["model", "optimizer"])
        want = load_role(os.path.join(one_dir, f"global_step_{step}", role), ["model", "optimizer"])
        for name, tensor in want["model"].items():
            torch.testing.assert_close(got["model"][name], tensor, rtol=1e-4, atol=WEIGHT_ATOL)
        for index, slots in want["optimizer"]["state"].items():
            torch.testing.assert_close(got["optimizer"]["state"][index]["exp_avg_sq"], slots["exp_avg_sq"],
                                       rtol=1e-3, atol=1e-9)


@pytest.mark.slow  # two spawned ranks (~13 s); tests/workers/test_offload_policy.py covers the policy in process
def test_cpu_offload_policy_and_activation_offload_on_two_ranks_give_the_metrics_and_checkpoint_of_one_process(
        tmp_path, arith_model_dir, arithmetic_files, one_process_run):
    """Every role under FSDP2's CPUOffloadPolicy (beside the between-phase offloads it supersedes, as verl's
    scripts set them) and activation offload for the actor and the critic: the metrics and saved states of one
    process (weight syncs gathered from host shards), and the saved actor exported as a Hugging Face model."""
    one_dir, expected = one_process_run
    out = str(tmp_path)
    policy = [f"{role}.fsdp_config.offload_policy=true" for role in
              ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")]
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=2, extra=[
        *policy, *OFFLOADS, "actor_rollout_ref.model.enable_activation_offload=true",
        "critic.model.enable_activation_offload=true", "trainer.save_freq=2",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]))).fit()
    records = read_metrics(out)
    assert records[1]["training/rollout_probs_diff_mean"] < 1e-5  # the synced weights are the actor's
    for got, want in zip(records, expected):
        assert_same_metrics(got, want)
    assert_same_states(out, one_dir, step=2)
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(os.path.join(out, "global_step_2", "actor", "huggingface"))
    saved = load_role(os.path.join(out, "global_step_2", "actor"), ["model"])["model"]
    for name, tensor in exported.state_dict().items():
        torch.testing.assert_close(tensor, saved[name], rtol=0, atol=0, msg=name)


def test_roles_on_separate_ranks_give_the_metrics_of_one_process(tmp_path, arith_model_dir, arithmetic_files):
    """actor+ref, rollout and critic each in a single-rank group of their own; the rollout gets the actor's
    weights gathered by the actor's group and handed over by the controller after every update.

    With one rollout rank the hf backend samples exactly as one process does (same seed, the same rows),
    and a critic built alone draws its fresh value head from the same seed as in one process (model
    loading draws nothing; the hybrid engine's construction would), hence hf here.
    """
    one = str(tmp_path / "one")
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, one, ranks=1, steps=2, engine="hf"))).fit()
    out = str(tmp_path / "split")
    trainer = PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=3, steps=2, engine="hf",
                                               extra=["actor_rollout_ref.actor.device_ids=[0]",
                                                      "actor_rollout_ref.ref.device_ids=[0]",
                                                      "actor_rollout_ref.rollout.device_ids=[1]",
                                                      "critic.device_ids=[2]"])))
    assert sorted(trainer.roles.groups.by_name) == ["actor_ref", "critic", "rollout"]
    trainer.fit()
    records = read_metrics(out)
    assert records[1]["training/rollout_probs_diff_mean"] < 1e-5  # the rollout group got the updated weights
    assert all(r["perf/update_weights_shared_memory"] == 1.0 and r["perf/update_weights_gb"] > 0 for r in records)
    assert not os.path.exists(trainer.roles.handoff.path)  # fit() removed the shared-memory buffer
    for got, want in zip(records, read_metrics(one)):
        assert_same_metrics(got, want)


def test_killed_rank_stops_the_run_and_checkpoints_resume_across_world_sizes(tmp_path, arith_model_dir,
                                                                              arithmetic_files, one_process_run):
    """1-process checkpoint → 2 ranks (step 2, saved) → rank 1 SIGKILLed in step 3 → resume in 1 process."""
    source, expected = one_process_run
    out = str(tmp_path / "run")
    copy_checkpoint(source, 1, out)
    trainer = PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=3,
                                               extra=["trainer.save_freq=1"])))
    victim = trainer.roles.groups.by_name["actor_rollout_ref"].pids[1]
    score, calls = trainer.roles.reward.compute_scores, []

    def score_then_kill(batch, **kwargs):  # reward runs on the controller, between gen and old_log_prob
        calls.append(1)
        if len(calls) == 2:  # step 3
            os.kill(victim, signal.SIGKILL)
        return score(batch, **kwargs)

    trainer.roles.reward.compute_scores = score_then_kill
    with pytest.raises(WorkerDiedError) as info:
        trainer.fit()
    message = str(info.value)
    assert "actor_rollout_ref worker rank 1 died" in message and "SIGKILL" in message
    assert info.value.rank == 1 and info.value.role == "actor_rollout_ref"
    with open(os.path.join(out, "latest_checkpointed_iteration.txt")) as f:
        assert f.read().strip() == "2"
    assert sorted(os.listdir(out)) == ["global_step_1", "global_step_2", "latest_checkpointed_iteration.txt",
                                       "metrics.jsonl"]  # no partial step-3 checkpoint
    assert_same_metrics(read_metrics(out)[0], expected[1])  # step 2 on 2 ranks, resumed from 1 process

    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=1, steps=3))).fit()
    records = read_metrics(out)
    assert [r["step"] for r in records] == [2, 3]
    assert_same_metrics(records[1], expected[2])  # step 3 in 1 process, resumed from 2 ranks' checkpoint


# A Ray instance the trainer starts itself on this box (and stops at the end).
LOCAL_RAY = ["trainer.launcher=ray", "ray_kwargs.ray_init.num_cpus=2", "+ray_kwargs.ray_init.include_dashboard=false"]


@pytest.fixture
def ray_stopped():
    """Ray imported (the test is skipped without it) and not initialised in this process."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridrl[ray]')")
    if ray.is_initialized():
        ray.shutdown()
    return ray


def test_ray_launcher_runs_two_workers(tmp_path, arith_model_dir, arithmetic_files, one_process_run, ray_stopped):
    ray = ray_stopped
    out = str(tmp_path)
    timeline = os.path.join(out, "timeline.json")
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=2, steps=2, extra=[
        *LOCAL_RAY, f"ray_kwargs.timeline_json_file={timeline}", "trainer.ray_wait_register_center_timeout=60",
    ]))).fit()
    assert not ray.is_initialized()  # the trainer started Ray, so it stopped it
    with open(timeline) as f:  # ray_kwargs.timeline_json_file: Chrome-trace events of the run's Ray tasks
        events = json.load(f)
    names = {event.get("name") for event in events}
    assert {"setup", "execute", "task:execute"} <= names  # the ranks' set-up and their method calls
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2]
    assert all(math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["critic/vf_loss"]) for r in records)
    assert_same_metrics(records[0], one_process_run[1][0])


@pytest.mark.parametrize("extra, message", [
    (["actor_rollout_ref.actor.device_ids=[0]", "actor_rollout_ref.rollout.device_ids=[0]", "critic.device_ids=[0,1]"],
     "the actor and critic need separate devices"),
    (["actor_rollout_ref.actor.device_ids=[0,5]"], "outside 0..1"),
    (["actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.name=hf"],
     r"tensor_model_parallel_size=2 needs the hybrid engine \(rollout.name=hf is the hf backend on cpu\)"),
    (["actor_rollout_ref.rollout.tensor_model_parallel_size=3"], "does not divide the rollout's 2 device"),
])
def test_placement_errors_come_before_any_worker_starts(tmp_path, arithmetic_files, extra, message):
    from hybridrl.config import ConfigError

    with pytest.raises(ConfigError, match=message):  # the model path does not exist: nothing was loaded
        PPOTrainer(load_config(overrides("/nonexistent/model", arithmetic_files, str(tmp_path), ranks=2, steps=1,
                                         extra=extra)))


@pytest.mark.slow
def test_one_rank_asked_to_use_ray_runs_its_roles_in_a_ray_actor(tmp_path, arith_model_dir, arithmetic_files,
                                                                 ray_stopped):
    """trainer.launcher=ray (like trainer.nnodes > 1 or ray_kwargs.ray_init.address) on one device: a one-rank Ray
    group, e.g. a driver on a CPU head node sending a one-GPU job to a cluster, not a silent one-process run."""
    from hybridrl.distributed import RayWorkerGroup

    out = str(tmp_path)
    trainer = PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=1, steps=1, extra=[
        *LOCAL_RAY, "trainer.ray_wait_register_center_timeout=60"])))
    try:
        group = trainer.roles.groups.by_name["actor_rollout_ref"]
        assert isinstance(group, RayWorkerGroup) and group.world_size == 1 and group.pids[0] != os.getpid()
        assert not trainer.memory.enabled  # the rank measures its phases, not the controller
    except BaseException:
        trainer.roles.shutdown()  # the actor and the Ray instance the trainer started
        raise
    trainer.fit()
    assert not ray_stopped.is_initialized()  # the trainer started Ray, so it stopped it
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1]
    assert math.isfinite(records[0]["actor/pg_loss"]) and math.isfinite(records[0]["critic/vf_loss"])


@pytest.mark.parametrize("ranks, launcher", [(2, ["trainer.launcher=ray"]), (1, [])])
def test_ray_start_failure_carries_init_ray_hint(tmp_path, arith_model_dir, arithmetic_files, ranks, launcher):
    """An unreachable ray_kwargs.ray_init.address fails on one device too (it used to train in this process)."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridrl[ray]')")
    from hybridrl.distributed import RayInitError

    with pytest.raises(RayInitError, match="could not connect to the Ray cluster at '127.0.0.1:1'.*ray start --head"):
        PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, str(tmp_path), ranks=ranks, steps=1,
                                         extra=launcher + ["+ray_kwargs.ray_init.address=127.0.0.1:1"])))


@pytest.mark.slow
def test_more_cpu_ranks_than_the_ray_it_starts_has_cpus_names_ray_init_num_cpus(tmp_path, arith_model_dir,
                                                                                arithmetic_files, ray_stopped):
    from hybridrl.distributed import PlacementError

    with pytest.raises(PlacementError, match=r"needs 4 CPU \(4 ranks\) but the Ray cluster has 2; .*"
                                             r"ray_kwargs.ray_init.num_cpus=4 .*, or run fewer ranks"):
        PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, str(tmp_path), ranks=4, steps=1,
                                         extra=LOCAL_RAY)))
    assert not ray_stopped.is_initialized()  # the failed start stopped the Ray instance it started


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the driver here must see no GPU")
def test_a_driver_without_a_gpu_asks_ray_for_gpu_ranks(tmp_path, arith_model_dir, arithmetic_files, ray_stopped):
    """trainer.device=cuda from a CPU-only driver (a head node): the ranks are placed by Ray on GPU nodes; this
    box's Ray has none, so placement (not a 'no CUDA device' refusal in the driver) is what stops it."""
    from hybridrl.distributed import PlacementError

    with pytest.raises(PlacementError, match=r"needs 1 GPU \(1 ranks\) but the Ray cluster has 0"):
        PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, str(tmp_path), ranks=1, steps=1, extra=[
            "trainer.device=cuda", *LOCAL_RAY])))
    assert not ray_stopped.is_initialized()


@pytest.mark.slow
def test_lora_on_two_ranks_gives_the_metrics_adapter_and_resume_of_one_process(tmp_path, arith_model_dir,
                                                                                 arithmetic_files):
    """LoRA with FSDP2: only the adapter trains on both ranks, the reference is the base with the adapter off,
    the rollout replicas get merged weights gathered one decoder layer at a time, and rank 0 writes the
    peft adapter from the gathered state: metrics and the saved adapter equal one process's, and the 2-rank
    checkpoint resumes in one process onto one process's step 3."""
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    lora = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
            "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.save_freq=2"]
    runs = {ranks: str(tmp_path / f"ranks{ranks}") for ranks in (1, 2)}
    for ranks, steps in ((1, 3), (2, 2)):
        PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, runs[ranks], ranks=ranks, steps=steps,
                                         extra=lora))).fit()
    records, expected = read_metrics(runs[2]), read_metrics(runs[1])
    assert records[0]["actor/kl_loss"] == 0.0 < records[1]["actor/kl_loss"]  # the reference is the untrained base
    assert records[1]["training/rollout_probs_diff_mean"] < 1e-5  # replicas got the merged, updated adapter
    for got, want in zip(records, expected):
        assert_same_metrics(got, want)
    adapters = [load_file(os.path.join(run, "global_step_2", "actor", "lora_adapter", "adapter_model.safetensors"))
                for run in (runs[2], runs[1])]
    assert adapters[1] and adapters[0].keys() == adapters[1].keys()
    assert any(not torch.equal(t, torch.zeros_like(t)) for name, t in adapters[1].items() if "lora_B" in name)
    for name, tensor in adapters[1].items():
        torch.testing.assert_close(adapters[0][name], tensor, rtol=1e-4, atol=WEIGHT_ATOL)
    resumed = str(tmp_path / "resumed")
    copy_checkpoint(runs[2], 2, resumed)
    PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, resumed, ranks=1, steps=3, extra=lora))).fit()
    assert_same_metrics(read_metrics(resumed)[-1], expected[2])
