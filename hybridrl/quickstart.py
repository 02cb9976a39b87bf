"""The embedded main job: a tiny model learns to reverse digit strings with GRPO, on CPU, with no downloads.

1. builds a tiny Qwen2-architecture model and a character tokenizer (random weights, offline);
2. writes a procedural task (reverse 4 digits) in verl's parquet format (disjoint train/test prompts);
3. a short supervised warm start (`hybridrl sft`) teaches the answer format and some of the skill;
4. GRPO (or PPO with a critic: `--algo gae`) through the very same trainer and verl-style config;
5. prints validation accuracy before and after and the `hybridrl train` command that ran step 4; keeps the final
   checkpoint, metrics.jsonl and a PNG of the curves.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from hybridrl.logging.log import get_logger

log = get_logger("hybridrl.quickstart")

MODEL_SHAPE = dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256,
                   max_position_embeddings=64)
VAL_KEY = "val-core/digits/reverse/reward/mean@1"


def prepare(out_dir: str, seed: int, num_train: int, num_test: int) -> tuple[str, str, str]:
    """Task parquet files and the tiny base model directory."""
    from hybridrl.data.digits import make_reverse_rows
    from hybridrl.data.parquet import write_parquet
    from hybridrl.models.tiny import save_tiny_model_dir

    test_rows = make_reverse_rows(num_test, seed=seed + 1, split="test")
    train_rows = make_reverse_rows(num_train, seed=seed, split="train",
                                   exclude={r["prompt"][0]["content"] for r in test_rows})
    data_dir = os.path.join(out_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    train_file, test_file = os.path.join(data_dir, "train.parquet"), os.path.join(data_dir, "test.parquet")
    write_parquet(train_rows, train_file)
    write_parquet(test_rows, test_file)
    model_dir = save_tiny_model_dir(os.path.join(out_dir, "base_model"), arch="qwen2", seed=seed,
                                    chars="0123456789+=", **MODEL_SHAPE)
    return train_file, test_file, model_dir


def rl_overrides(model_dir: str, train_file: str, test_file: str, out_dir: str, algo: str, steps: int,
                 seed: int, test_freq: int = 10) -> list[str]:
    """The run as a verl command line would spell it."""
    overrides = [
        f"algorithm.adv_estimator={algo}", f"data.train_files={train_file}", f"data.val_files={test_file}",
        "data.train_batch_size=32", "data.max_prompt_length=8", "data.max_response_length=6",
        f"actor_rollout_ref.model.path={model_dir}", f"critic.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.optim.lr=2e-4", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=256",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "trainer.device=cpu", "trainer.logger=[console,file]", f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={test_freq}", f"trainer.save_freq={steps}", "trainer.val_before_train=true",
        f"trainer.default_local_dir={os.path.join(out_dir, 'run')}", f"trainer.seed={seed}",
        "trainer.project_name=quickstart", f"trainer.experiment_name=reverse_{algo}",
    ]
    if algo == "gae":
        overrides += ["critic.optim.lr=1e-3", "critic.ppo_micro_batch_size_per_gpu=128",
                      "critic.model.enable_gradient_checkpointing=false", "trainer.critic_warmup=0"]
    return overrides


def train_command(overrides: list[str]) -> str:
    """The RL stage as a shell command, one override per line."""
    return "hybridrl train \\\n" + " \\\n".join(f"  {shlex.quote(o)}" for o in overrides)


def train_rl_stage(out_dir: str, overrides: list[str]) -> tuple[str, str]:
    """Write the RL stage's `hybridrl train` command to out_dir/train_command.sh, run it in this process, and
    return (the command, its metrics.jsonl)."""
    from hybridrl.config import load_config
    from hybridrl.trainer.ppo_trainer import PPOTrainer

    command = train_command(overrides)
    with open(os.path.join(out_dir, "train_command.sh"), "w", encoding="utf-8") as handle:
        handle.write(command + "\n")
    cfg = load_config(overrides)
    PPOTrainer(cfg).fit()
    return command, os.path.join(cfg.trainer.default_local_dir, "metrics.jsonl")


def validation_curve(metrics_file: str) -> list[tuple[int, float]]:
    with open(metrics_file) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r["step"], r[VAL_KEY]) for r in records if r.get(VAL_KEY) is not None]


def run(out_dir: str, *, algo: str = "grpo", steps: int = 80, sft_epochs: float = 1.2, seed: int = 0,
        num_train: int = 2000, num_test: int = 200, test_freq: int = 10, plot: bool = True) -> dict:
    from hybridrl.sft import run_sft

    start = time.time()
    train_file, test_file, base_dir = prepare(out_dir, seed, num_train, num_test)
    sft_dir = os.path.join(out_dir, "sft_model")
    run_sft(base_dir, [train_file], sft_dir, epochs=sft_epochs, lr=3e-3, batch_size=64, seed=seed)
    overrides = rl_overrides(sft_dir, train_file, test_file, out_dir, algo, steps, seed, test_freq)
    command, metrics_file = train_rl_stage(out_dir, overrides)
    curve = validation_curve(metrics_file)
    result = {"val_accuracy_before": curve[0][1], "val_accuracy_after": curve[-1][1], "curve": curve,
              "metrics_file": metrics_file, "seconds": round(time.time() - start, 1), "train_command": command,
              "checkpoint": os.path.join(os.path.dirname(metrics_file), f"global_step_{steps}")}
    if plot:
        from hybridrl.logging.plot import plot_metrics

        result["plot"] = plot_metrics(metrics_file, None, os.path.join(out_dir, "curves.png"))
    return result


def write_result(out_dir: str, result: dict, command: str, **settings) -> str:
    """`<out_dir>/result.json`: the figures a run of the quickstart gives, with its command and machine (the
    README's expected figures are generated from such a file: scripts/readme_table.py)."""
    import platform

    import torch

    record = {"command": command, **settings, **{k: result[k] for k in ("val_accuracy_before", "val_accuracy_after",
                                                                        "seconds", "curve")},
              "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__}}
    path = os.path.join(out_dir, "result.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybridrl quickstart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/quickstart", help="output directory")
    parser.add_argument("--algo", default="grpo", choices=["grpo", "gae", "rloo", "reinforce_plus_plus"])
    parser.add_argument("--steps", type=int, default=80, help="RL steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.out, algo=args.algo, steps=args.steps, seed=args.seed)
    write_result(args.out, result, "hybridrl quickstart " + shlex.join(argv if argv is not None else sys.argv[1:]),
                 steps=args.steps, seed=args.seed, algo=args.algo)
    before, after = result["val_accuracy_before"], result["val_accuracy_after"]
    print(f"\nthe RL stage ran this command (also in {os.path.join(args.out, 'train_command.sh')}):\n"
          f"{result['train_command']}\n")
    print(f"quickstart ({args.algo}): validation accuracy {100 * before:.1f}% -> {100 * after:.1f}% "
          f"in {result['seconds']}s\nmetrics:    {result['metrics_file']}\ncurves:     {result.get('plot')}\n"
          f"checkpoint: {result['checkpoint']}\nexport it:  hybridrl export {result['checkpoint']} "
          f"{os.path.join(args.out, 'hf_model')}")
    return 0
