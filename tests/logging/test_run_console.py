"""The start banner (from a real config and a real tiny model) and the end summary (from logged steps)."""

from __future__ import annotations

import os

from hybridrl.config import load_config
from hybridrl.logging.banner import format_banner, model_parameters, run_facts
from hybridrl.logging.run_console import RunConsole, latest_checkpoint


def facts_for(overrides: list[str], model_dir: str, out_dir: str, **numbers):
    cfg = load_config(["algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={model_dir}", *overrides])
    args = dict(needs_critic=False, needs_reference=True, device_type="cpu", num_devices=2, rollout_backend="hf",
                train_rows=64, val_rows=16, prompt_lengths=[5, 6, 7], steps_per_epoch=8, total_steps=4,
                start_step=0, output_dir=out_dir, version="9.9")
    return run_facts(cfg, **{**args, **numbers})


def test_model_parameters_counts_without_loading(arith_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(arith_model_dir)
    assert model_parameters(arith_model_dir) == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert model_parameters("/no/such/model") is None


def test_banner_names_model_devices_data_algorithm_batches_and_memory(arith_model_dir, tmp_path):
    facts = facts_for(["data.train_batch_size=8", "actor_rollout_ref.rollout.n=4",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                       "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                       "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.ref.fsdp_config.param_offload=true"],
                      arith_model_dir, str(tmp_path))
    banner = format_banner(facts)
    params = model_parameters(arith_model_dir)
    for needle in (f"hybridrl 9.9 | grpo", f"{arith_model_dir} ({params / 1e3:.3g}k parameters)",
                   "cpu x 2, rollout backend hf", "colocated: every role on all 2 cpu device(s)",
                   "KL loss low_var_kl x 0.001", "roles: actor, rollout, reference",
                   "train 64 prompts (prompt tokens max 7, mean 6), validation 16 prompts",
                   "4 training steps (8 per epoch)",
                   "8 prompts x 4 samples = 32 sequences per step; mini-batch 4 prompts (2 optimizer step(s) per step); "
                   "micro-batch 2 sequences per device",
                   "over 2 ranks (fp32 weights, gradients, AdamW)", "(on the CPU between phases)", str(tmp_path)):
        assert needle in banner, needle


def test_banner_lists_role_placement_and_the_gpu_kv_budget(arith_model_dir, tmp_path):
    facts = facts_for(["actor_rollout_ref.actor.device_ids=[0,1]", "actor_rollout_ref.rollout.device_ids=[2,3]",
                       "actor_rollout_ref.rollout.gpu_memory_utilization=0.4"], arith_model_dir, str(tmp_path),
                      device_type="cuda", num_devices=4, start_step=2)
    banner = format_banner(facts)
    assert "actor on [0, 1]; rollout on [2, 3]; roles not listed follow the actor" in banner
    assert "rollout KV cache: up to 40% of each GPU while generating, freed after each generation" in banner
    assert "resuming after step 2" in banner
    lora = format_banner(facts_for(["actor_rollout_ref.model.lora_rank=8"], arith_model_dir, str(tmp_path),
                                   device_type="cuda"))
    assert "LoRA rank 8 (only the adapter trains)" in lora and "frozen base weights plus the LoRA adapter" in lora
    policy = format_banner(facts_for([f"actor_rollout_ref.{role}.fsdp_config.offload_policy=true" for role in
                                      ("actor", "ref")] + ["actor_rollout_ref.actor.use_kl_loss=true"], arith_model_dir,
                                     str(tmp_path), device_type="cuda", num_devices=4))
    assert "AdamW); on the CPU (fsdp_config.offload_policy)" in policy
    assert "over 4 ranks (on the CPU: fsdp_config.offload_policy)" in policy


def test_summary_reports_best_validation_time_throughput_and_export(arith_model_dir, tmp_path, capsys):
    now = [0.0]
    console = RunConsole(facts_for([], arith_model_dir, str(tmp_path)), progress_enabled=False, clock=lambda: now[0])
    key = "val-core/digits/reverse/reward/mean@1"
    console.log({key: 0.3}, step=0)  # validation before training
    for step, val in ((1, None), (2, 0.7), (3, None), (4, 0.6)):
        now[0] += 10.0
        metrics = {"timing_s/step": 10.0, "perf/throughput": 1000.0 * step, "perf/total_num_tokens": 500.0}
        console.log({**metrics, **({key: val} if val is not None else {})}, step=step)
    (tmp_path / "global_step_4").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    console.finish()
    out = capsys.readouterr().out
    assert out.index("hybridrl 9.9") < out.index("progress: step 4/4") < out.index("done: 4 steps in 40s")
    assert "2,500 tokens/s per device (mean of steps), 2,000 tokens" in out
    assert f"best val    {key} = 0.7 at step 2 (step 0: 0.3)" in out
    checkpoint = os.path.join(str(tmp_path), "global_step_4")
    assert f"export      hybridrl export {checkpoint} {tmp_path / 'hf_model'}" in out


def test_latest_checkpoint_needs_the_tracker_and_the_folder(tmp_path):
    assert latest_checkpoint(str(tmp_path)) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert latest_checkpoint(str(tmp_path)) is None  # named but not there
    (tmp_path / "global_step_3").mkdir()
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "global_step_3")
