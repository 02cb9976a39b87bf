"""LoRA through the trainer (adapter-only updates, reference = adapter disabled, delta sync, export) and
offload toggles leaving results unchanged."""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from hybridrl.checkpoint.export_cli import main as export_main
from hybridrl.config import load_config
from hybridrl.rollout.base import SamplingParams
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides

pytest.importorskip("peft")

LORA = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1", "trainer.save_freq=2"]


REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return solution_str.count("1") / 4.0  # dense enough that a random tiny policy gets varied rewards
"""


def lora_run(tmp_path, model_dir, files, backend: str) -> PPOTrainer:
    reward_file = os.path.join(str(tmp_path), "reward.py")
    os.makedirs(str(tmp_path), exist_ok=True)
    with open(reward_file, "w") as f:
        f.write(REWARD)
    overrides = [o for o in tiny_run_overrides(model_dir, files, str(tmp_path)) if not o.startswith(
        "actor_rollout_ref.rollout.name=")]
    trainer = PPOTrainer(load_config(overrides + LORA + [f"actor_rollout_ref.rollout.name={backend}",
                                                          "actor_rollout_ref.rollout.dtype=float32",
                                                          f"custom_reward_function.path={reward_file}"]))
    return trainer


def test_lora_grpo_trains_only_the_adapter_and_syncs_merged_deltas(tmp_path, arith_model_dir, arithmetic_files):
    trainer = lora_run(tmp_path, arith_model_dir, arithmetic_files, "hybrid")
    model = local_worker(trainer).actor.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.fit()
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed), sorted(changed)[:5]
    assert any("lora_B" in k for k in changed)  # B starts at zero: the policy itself moved
    record = json.loads(open(os.path.join(str(tmp_path), "metrics.jsonl")).readlines()[-1])
    assert record["actor/kl_loss"] > 0.0  # the reference (adapter disabled) differs from the trained policy
    assert record["training/rollout_probs_diff_mean"] < 1e-5  # rollout (merged deltas) agrees with the trainer
    # The engine got base + merged adapter: its greedy output equals HF greedy of the merged model.
    merged = AutoModelForCausalLM.from_pretrained(arith_model_dir)
    merged.load_state_dict(_merged_state(model))
    prompts = [[5, 6, 7, 4], [8, 9, 10]]
    local_worker(trainer).rollout.backend.wake_up()  # free_cache_engine: the KV cache exists only while generating
    got = local_worker(trainer).rollout.backend.generate(prompts, SamplingParams(do_sample=False, max_new_tokens=5,
                                                                         ignore_eos=True)).token_ids
    for prompt, tokens in zip(prompts, got):
        ref = merged.generate(torch.tensor([prompt]), max_new_tokens=5, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
        assert tokens == ref[0, len(prompt):].tolist()
    # Export: merged model and adapter; both reload with the live model's logits.
    step_dir = os.path.join(str(tmp_path), "global_step_2")
    assert export_main([step_dir, str(tmp_path / "merged")]) == 0
    assert export_main([step_dir, str(tmp_path / "adapter"), "--adapter-only"]) == 0
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        live = model.eval()(ids).logits
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))(ids).logits, live)
    assert os.path.exists(tmp_path / "adapter" / "adapter_config.json")


def _merged_state(peft_model) -> dict:
    from hybridrl.models.lora import merged_named_weights

    return {name: tensor.clone() for name, tensor in merged_named_weights(peft_model)}


def test_offload_toggles_leave_training_results_unchanged(tmp_path, arith_model_dir, arithmetic_files):
    """Between-phase offload, and in one process offload_policy (acting as it, with a warning) with activation
    offload, whose hooks see the actor's update: the same metrics, step by step, as a plain run."""
    runs = []
    for name, flags in (("plain", []), ("offload", [
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
            "actor_rollout_ref.ref.fsdp_config.param_offload=true"]), ("policy", [
            "actor_rollout_ref.actor.fsdp_config.offload_policy=true",
            "actor_rollout_ref.ref.fsdp_config.offload_policy=true",
            "actor_rollout_ref.model.enable_activation_offload=true"])):
        out = str(tmp_path / name)
        trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, extra=[
            "actor_rollout_ref.actor.use_kl_loss=true"] + flags)))
        trainer.fit()
        records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        runs.append([{k: v for k, v in r.items() if not k.startswith(("timing", "perf"))} for r in records])
    hooks = local_worker(trainer).actor.activation_offload
    assert hooks is not None and hooks.counts.activations > 0
    assert local_worker(trainer).actor.offloader.optimizer_offload  # offload_policy without a process group
    assert len(runs[0]) == 2 and runs[0] == runs[1] == runs[2]
