"""The command line: package import, entry points, verl's GSM8K command line end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys


from hybridrl.cli import main as cli_main


def run_py(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_import_prints_only_the_version():
    out = run_py("-c", "import hybridrl; print(hybridrl.__version__)")
    assert out.returncode == 0
    assert out.stdout.strip() == __import__("hybridrl").__version__ and out.stderr == ""


def test_import_is_light():
    out = run_py("-c", "import sys, hybridrl, hybridrl.config; print('torch' in sys.modules)")
    assert out.stdout.strip() == "False"


def test_unknown_command_suggests(capsys):
    assert cli_main(["trian"]) == 2
    assert "did you mean 'train'" in capsys.readouterr().err


def test_main_ppo_reports_config_errors_without_traceback():
    out = run_py("-m", "hybridrl.trainer.main_ppo", "actor_rollout_ref.actor.ppo_mini_bach_size=4")
    assert out.returncode == 2
    assert "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'" in out.stderr
    assert "Traceback" not in out.stderr


def test_batch_and_placement_errors_come_before_the_trainer_is_imported():
    """Problems that need no model (micro-batch sizes, device lists) answer before transformers and the
    workers are imported: exit 2, the keys to set, no traceback."""
    code = ("import sys; from hybridrl.trainer.main_ppo import main; "
            "rc = main(['trainer.n_gpus_per_node=2', 'actor_rollout_ref.actor.device_ids=[0,7]']); "
            "print(rc, 'transformers' in sys.modules, 'hybridrl.trainer.ppo_trainer' in sys.modules)")
    out = run_py("-c", code)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr
    assert "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in out.stderr
    assert "outside 0..1" in out.stderr and "Traceback" not in out.stderr


def test_print_config_exits_zero(capsys):
    assert cli_main(["print-config", "data.train_batch_size=64"]) == 0
    assert "train_batch_size: 64" in capsys.readouterr().out


def test_verl_gsm8k_grpo_command_line_runs(tmp_path, gsm8k_dir, tiny_model_dir):
    """verl's GSM8K GRPO recipe (reference/verl.md §3) on CPU: preprocess, then main_ppo with verl keys."""
    data_dir = str(tmp_path / "gsm8k")
    assert cli_main(["preprocess", "gsm8k", "--local_dataset_path", str(gsm8k_dir), "--local_save_dir", data_dir]) == 0
    out_dir = str(tmp_path / "run")
    args = [
        "-m", "hybridrl.trainer.main_ppo", "algorithm.adv_estimator=grpo",
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/test.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=256", "data.max_response_length=8",
        "data.filter_overlong_prompts=False", "data.truncation='left'", "data.train_max_samples=16",
        "data.val_max_samples=4", f"actor_rollout_ref.model.path={tiny_model_dir}",
        "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
        "algorithm.use_kl_in_reward=False", "trainer.critic_warmup=0", "trainer.logger=['console','file']",
        "trainer.project_name='verl_grpo_example_gsm8k'", "trainer.experiment_name='tiny_function_rm'",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.save_freq=2", "trainer.test_freq=2",
        "trainer.total_training_steps=2", f"trainer.default_local_dir={out_dir}", "trainer.device=cpu",
        "trainer.log_val_generations=2", f"trainer.validation_data_dir={tmp_path / 'val_dump'}",
    ]
    out = run_py(*args)  # stdout is not a TTY here: progress lines instead of a bar
    assert out.returncode == 0, out.stderr[-3000:]
    console = out.stdout
    # what a person watching it reads: the banner, one readable line per step, progress, samples, the summary
    assert console.index("hybridrl ") < console.index("step:1 | policy") < console.index("done: 2 steps")
    for needle in (f"model      {tiny_model_dir}", "train 16 prompts", "4 prompts x 2 samples = 8 sequences per step",
                   "progress: step 2/2 (100%)", "validation generations at step 0 (2 samples",
                   "best val    val-core/openai/gsm8k/reward/mean@1", f"hybridrl export {out_dir}/global_step_2"):
        assert needle in console, needle
    lines = [line for line in console.splitlines() if line.startswith("step:")]
    assert len(lines) == 3 and "val openai/gsm8k reward@1" in lines[0]
    assert all(len(line) < 400 for line in lines) and " tok/s" in lines[1]
    records = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    assert [r["step"] for r in records] == [0, 1, 2] and len(records[1]) > 40  # every key still goes to the file
    assert os.path.isdir(os.path.join(out_dir, "global_step_2", "actor"))
    dumped = [json.loads(line) for line in open(tmp_path / "val_dump" / "2.jsonl")]  # verl's validation dump
    assert len(dumped) == 4 and {"input", "output", "gts", "score", "step"} <= set(dumped[0])
    assert len(open(os.path.join(out_dir, "val_generations.jsonl")).readlines()) == 2 * 2  # steps 0 and 2


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_command_answers_help(capsys):
    from hybridrl.cli import COMMANDS

    for command in COMMANDS:
        for flag in ("--help", "-h"):
            code, out, err = run_cli([command, flag], capsys)
            assert code == 0, (command, flag, err)
            assert "usage" in out.lower() and f"hybridrl {command}" in out, (command, flag, out)


def test_train_help_lists_common_overrides_and_points_at_the_docs(capsys):
    code, out, _ = run_cli(["train", "--help"], capsys)
    assert code == 0
    for needle in ("data.train_files=", "actor_rollout_ref.model.path=", "actor_rollout_ref.rollout.n=",
                   "trainer.total_epochs=", "hybridrl print-config --docs", "HYDRA_FULL_ERROR=1"):
        assert needle in out, needle
    assert run_cli(["help", "train"], capsys)[1] == out  # `hybridrl help train` says the same


def test_main_ppo_help_needs_no_trainer():
    out = run_py("-c", "import sys; from hybridrl.trainer.main_ppo import main; rc = main(['-h']); "
                       "print(rc, 'hybridrl.trainer.ppo_trainer' in sys.modules)")
    assert out.stdout.strip().endswith("0 False") and "common overrides" in out.stdout


def test_version_and_top_level_help(capsys):
    import hybridrl

    assert run_cli(["--version"], capsys)[:2] == (0, f"hybridrl {hybridrl.__version__}\n")
    code, out, _ = run_cli(["-h"], capsys)
    assert code == 0 and "print-config" in out and "--version" in out
    out = run_py("-m", "hybridrl", "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"hybridrl {hybridrl.__version__}"


def test_usage_errors_exit_two_without_a_traceback(capsys):
    code, _, err = run_cli(["export"], capsys)  # its two positional arguments are missing
    assert code == 2 and "the following arguments are required" in err and "Traceback" not in err
