"""The tool quickstart (`hybridrl quickstart --task tool`): a tiny model learns to use a calculator with GRPO, on CPU.

1. builds a tiny Qwen2-architecture model with a ChatML character tokenizer (tool role, `<tool_call>` blocks);
2. writes a procedural task the model cannot do in its head, multi-digit multiplication ("482*37="), as verl-format
   tool rows (`agent_name: tool_agent`, as verl's gsm8k_tool_agent_loop rows);
3. a supervised warm start (quickstart_tool_sft.py) on tool-using traces: the model writes a hermes `<tool_call>`
   to the built-in calculator, reads `<tool_response>`, answers. The traces are the token streams the agent loop
   itself builds (continuous tokens), and only the model's own turns are trained on. It also imitates answering
   without the tool on some problems, so the warm-started model calls the calculator on only a fifth or so of
   them, and gets about that fraction right;
4. GRPO through the very same trainer with `actor_rollout_ref.rollout.multi_turn.enable=true`: every rollout is a
   real multi-turn trajectory, the calculator runs for every call the model writes, the tool's tokens are masked
   out of the loss, and the reward is exact match of the final answer (a custom reward function, verl's way);
5. prints validation accuracy and mean tool calls per trajectory before and after RL (RL learns to call the
   calculator every time), the `hybridrl train` command that ran step 4, and writes result.json.

The rollout runs on hybridrl's own engine (`rollout.name=hybrid`, float32 on CPU): its continuous batching keeps
every trajectory decoding while others wait for the calculator.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from typing import Any

from hybridrl.quickstart_tool_sft import CALCULATOR

DATA_SOURCE = "arithmetic/calculator"
VAL_KEY = f"val-core/{DATA_SOURCE}/reward/mean@1"
VAL_TOOL_CALLS_KEY = f"val-aux/{DATA_SOURCE}/tool_calls/mean@1"
# Eight query and eight key/value heads of 16 dims: copying needs a head that attends a fixed distance back, and more
# heads give more starting points for one (with 4 query heads sharing 2 key/value heads it formed far later).
MODEL_SHAPE = dict(hidden_size=128, num_layers=2, num_heads=8, num_kv_heads=8, intermediate_size=256,
                   max_position_embeddings=256)
PROMPT_LENGTH, RESPONSE_LENGTH = 80, 128


# ------------------------------------------------------------------ the task
def make_rows(num_rows: int, seed: int, split: str, exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """`num_rows` distinct "a*b=" problems (a: 300-999, b: 34-99: the product always has 5 digits), verl tool rows."""
    from hybridrl.data.arithmetic import draw_distinct, make_row

    def draw(rng: random.Random) -> tuple[str, int]:
        a, b = rng.randint(300, 999), rng.randint(34, 99)
        return f"{a}*{b}=", a * b

    rows = []
    for index, (prompt, answer) in enumerate(draw_distinct(num_rows, seed, draw, exclude or set())):
        row = make_row(prompt, answer, split, index, data_source=DATA_SOURCE, ability="math")
        row["agent_name"] = "tool_agent"
        rows.append(row)
    return rows


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """verl's custom reward signature. `solution_str` is the whole trajectory (tool turns included, as verl gives
    it); the answer is its last line, exact match. `tool_calls` (calls the trajectory made) is reported beside."""
    lines = solution_str.strip().splitlines()
    answer = lines[-1].strip() if lines else ""
    tool_calls = len((extra_info or {}).get("tool_rewards") or [])
    return {"score": 1.0 if answer == str(ground_truth).strip() else 0.0, "tool_calls": float(tool_calls)}


# ------------------------------------------------------------------ the run
def prepare(out_dir: str, seed: int, num_train: int, num_test: int) -> tuple[str, str, str, list[dict[str, Any]]]:
    """Task parquet files, the tiny base model directory, and the training rows (for the warm start)."""
    from hybridrl.data.parquet import write_parquet
    from hybridrl.models.tiny import save_tiny_model_dir

    test_rows = make_rows(num_test, seed + 1, "test")
    train_rows = make_rows(num_train, seed, "train", exclude={r["prompt"][0]["content"] for r in test_rows})
    data_dir = os.path.join(out_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    train_file, test_file = os.path.join(data_dir, "train.parquet"), os.path.join(data_dir, "test.parquet")
    write_parquet(train_rows, train_file)
    write_parquet(test_rows, test_file)
    model_dir = save_tiny_model_dir(os.path.join(out_dir, "base_model"), arch="qwen2", seed=seed, chat_format="chatml",
                                    **MODEL_SHAPE)
    return train_file, test_file, model_dir, train_rows


def rl_overrides(model_dir: str, train_file: str, test_file: str, out_dir: str, *, steps: int, seed: int,
                 test_freq: int, batch_size: int = 16, n: int = 8, lr: float = 2e-4) -> list[str]:
    """The run as a verl command line would spell it (verl's multi-turn keys, a custom reward function)."""
    return [
        "algorithm.adv_estimator=grpo", f"data.train_files={train_file}", f"data.val_files={test_file}",
        f"data.train_batch_size={batch_size}", f"data.max_prompt_length={PROMPT_LENGTH}",
        f"data.max_response_length={RESPONSE_LENGTH}", "data.return_raw_chat=true",
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        f"actor_rollout_ref.actor.optim.lr={lr}", f"actor_rollout_ref.actor.ppo_mini_batch_size={batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={min(64, batch_size * n)}",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=hybrid", "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.rollout.n={n}", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=128",
        "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.format=hermes",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={CALCULATOR}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        f"custom_reward_function.path={os.path.abspath(__file__)}", "custom_reward_function.name=compute_score",
        "trainer.device=cpu", "trainer.logger=[console,file]", f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={test_freq}", f"trainer.save_freq={steps}", "trainer.val_before_train=true",
        f"trainer.default_local_dir={os.path.join(out_dir, 'run')}", f"trainer.seed={seed}",
        "trainer.project_name=quickstart", "trainer.experiment_name=calculator_grpo",
    ]


def validation_curve(metrics_file: str) -> list[tuple[int, float, float]]:
    """(step, accuracy, mean tool calls) of every validation in the run's metrics.jsonl."""
    with open(metrics_file, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return [(r["step"], r[VAL_KEY], r[VAL_TOOL_CALLS_KEY]) for r in records if r.get(VAL_KEY) is not None]


def run(out_dir: str, *, steps: int = 30, seed: int = 0, num_train: int = 2000, num_test: int = 128,
        test_freq: int = 10, warm_start_max_steps: int = 600, batch_size: int = 16, n: int = 8, lr: float = 2e-4,
        plot: bool = True) -> dict:
    """Data and base model, the warm start, then GRPO through the trainer; returns the figures (result.json's)."""
    from hybridrl.quickstart import train_rl_stage
    from hybridrl.quickstart_tool_sft import warm_start

    start = time.time()
    train_file, test_file, base_dir, train_rows = prepare(out_dir, seed, num_train, num_test)
    sft_dir = os.path.join(out_dir, "sft_model")
    warm = warm_start(base_dir, train_rows, sft_dir, max_steps=warm_start_max_steps, seed=seed)
    overrides = rl_overrides(sft_dir, train_file, test_file, out_dir, steps=steps, seed=seed, test_freq=test_freq,
                             batch_size=batch_size, n=n, lr=lr)
    command, metrics_file = train_rl_stage(out_dir, overrides)
    curve = validation_curve(metrics_file)
    result = {"val_accuracy_before": curve[0][1], "val_accuracy_after": curve[-1][1],
              "val_tool_calls_before": curve[0][2], "val_tool_calls_after": curve[-1][2], "curve": curve,
              "warm_start": warm, "metrics_file": metrics_file, "seconds": round(time.time() - start, 1),
              "train_command": command,
              "checkpoint": os.path.join(os.path.dirname(metrics_file), f"global_step_{steps}")}
    if plot:
        from hybridrl.logging.plot import plot_metrics

        result["plot"] = plot_metrics(metrics_file, None, os.path.join(out_dir, "curves.png"))
    return result


def main(argv: list[str] | None = None) -> int:
    from hybridrl.quickstart import write_result

    parser = argparse.ArgumentParser(prog="hybridrl quickstart --task tool", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/quickstart_tool", help="output directory")
    parser.add_argument("--steps", type=int, default=30, help="RL steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.out, steps=args.steps, seed=args.seed)
    command = "hybridrl quickstart --task tool " + shlex.join(argv if argv is not None else sys.argv[1:])
    write_result(args.out, result, command, steps=args.steps, seed=args.seed, task="tool",
                 val_tool_calls_before=result["val_tool_calls_before"],
                 val_tool_calls_after=result["val_tool_calls_after"], warm_start=result["warm_start"])
    print(f"\nthe RL stage ran this command (also in {os.path.join(args.out, 'train_command.sh')}):\n"
          f"{result['train_command']}\n")
    warm = result["warm_start"]
    print(f"warm start: {warm['steps']} steps; once it calls the calculator it writes a whole worked trace with "
          f"probability {warm['copy_exact']:.2f}, and it calls on a problem with probability "
          f"{warm['call_probability']:.2f}")
    if warm["copy_exact_at_stop"] < warm["target"]:
        print(f"note: the warm start reached its step limit before that probability reached {warm['target']}; with a "
              f"model that copies this unreliably RL gains less (try another --seed)")
    print(f"quickstart (tool): validation accuracy {100 * result['val_accuracy_before']:.1f}% -> "
          f"{100 * result['val_accuracy_after']:.1f}%, calculator calls per answer "
          f"{result['val_tool_calls_before']:.2f} -> {result['val_tool_calls_after']:.2f}, in {result['seconds']}s\n"
          f"metrics:    {result['metrics_file']}\n"
          f"curves:     {result.get('plot')}\ncheckpoint: {result['checkpoint']}")
    return 0
