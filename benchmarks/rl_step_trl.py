"""The peer: TRL's `GRPOTrainer` on the same model directory, prompts and RL step.

Configured to match hybridrl's step: one generation of prompts × n responses (HF `generate`, no vLLM,
`min_new_tokens` = max length so every response has the forced length), a KL loss against a reference
(beta), and one optimizer step over all responses (per_device_train_batch_size × gradient
accumulation = generation batch). The reward is a constant function (the reward phase is negligible in
both). TRL is imported lazily; when it is missing or its API differs the result is `{"error": ...}`.
"""

from __future__ import annotations

import functools
import time
import traceback
from pathlib import Path
from typing import Any

import torch


def constant_reward(completions, **kwargs) -> list[float]:
    return [0.0] * len(completions)


def grpo_config_kwargs(args, paths: dict[str, Path], dtype: torch.dtype) -> dict[str, Any]:
    rows = args.num_prompts * args.n
    return dict(
        output_dir=str(paths["work"] / "trl"), per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=rows // args.micro_batch, num_generations=args.n, generation_batch_size=rows,
        max_completion_length=args.response_length, generation_kwargs={"min_new_tokens": args.response_length},
        beta=args.kl_coef, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.01,
        max_grad_norm=1.0, bf16=dtype == torch.bfloat16 and args.device == "cuda",
        gradient_checkpointing=not args.no_grad_ckpt, use_vllm=False, max_steps=args.steps, logging_steps=1,
        report_to="none", save_strategy="no", seed=args.seed, temperature=1.0, top_k=0, top_p=1.0,
        num_iterations=1, shuffle_dataset=False, dataloader_num_workers=0, disable_tqdm=True,
        use_cpu=args.device == "cpu", model_init_kwargs={"dtype": dtype})


def make_step_timer(device: str):
    """A TrainerCallback timing each optimizer step (begin→end, device synced) and its peak memory."""
    from transformers import TrainerCallback

    from benchmarks.common import peak_memory_gb, reset_peak_memory, sync

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.step_s: list[float] = []
            self.peak_gb: list[float | None] = []
            self.tokens_seen: list[int] = []

        def on_step_begin(self, args, state, control, **kwargs):
            sync(device)
            reset_peak_memory(device)
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            sync(device)
            self.step_s.append(time.perf_counter() - self._start)
            self.peak_gb.append(peak_memory_gb(device))
            self.tokens_seen.append(int(state.num_input_tokens_seen))

    return StepTimer()


def _time_method(trainer, name: str, into: list[float], device: str) -> None:
    """Append the wall time of every `trainer.name(...)` call to `into` (device synced)."""
    from benchmarks.common import sync

    method = getattr(trainer, name, None)
    if method is None:
        return

    @functools.wraps(method)
    def timed(*args, **kwargs):
        sync(device)
        start = time.perf_counter()
        out = method(*args, **kwargs)
        sync(device)
        into.append(time.perf_counter() - start)
        return out

    setattr(trainer, name, timed)


def summarize(timer, gen_s: list[float], gen_score_s: list[float], warmup: int) -> dict[str, Any]:
    """Steady-state step time, tokens/s ((prompt + completion tokens) / step time) and peak memory."""
    tokens = [b - a for a, b in zip([0] + timer.tokens_seen, timer.tokens_seen)]
    steady = list(range(warmup, len(timer.step_s))) or list(range(len(timer.step_s)))
    seconds = sum(timer.step_s[i] for i in steady)
    out: dict[str, Any] = {
        "steady_steps": [i + 1 for i in steady], "step_s": seconds / len(steady),
        "tokens_per_step": sum(tokens[i] for i in steady) / len(steady),
        "tokens_per_s": sum(tokens[i] for i in steady) / seconds, "step_s_all": timer.step_s,
        "peak_memory_gb": max((timer.peak_gb[i] for i in steady if timer.peak_gb[i] is not None), default=None)}
    if len(gen_s) == len(timer.step_s):
        out["timing_s/gen"] = sum(gen_s[i] for i in steady) / len(steady)
    if len(gen_score_s) == len(timer.step_s):  # generate + decode + reward + ref log-probs + advantages
        out["timing_s/gen_score_ref"] = sum(gen_score_s[i] for i in steady) / len(steady)
        out["timing_s/train"] = out["step_s"] - out["timing_s/gen_score_ref"]
    return out


def run(args, paths: dict[str, Path], rows: list[dict], dtype: torch.dtype) -> dict[str, Any]:
    """TRL GRPO for `args.steps` optimizer steps; `{"error": ...}` instead of raising."""
    try:
        import datasets
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except Exception as err:  # ImportError, or a broken install
        return {"error": f"TRL not importable: {type(err).__name__}: {err}"}
    version = {"trl": trl.__version__, "datasets": datasets.__version__}
    try:
        return {**version, **_run(args, paths, rows, dtype, datasets, GRPOConfig, GRPOTrainer)}
    except Exception as err:  # an API difference or a runtime failure: report it, keep the other results
        return {**version, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}


def _run(args, paths, rows, dtype, datasets, GRPOConfig, GRPOTrainer) -> dict[str, Any]:
    from benchmarks.rl_step_hybridrl import release_memory
    from hybridrl.models.hf import load_tokenizer

    dataset = datasets.Dataset.from_list([{"prompt": list(row["prompt"])} for row in rows])
    config = GRPOConfig(**grpo_config_kwargs(args, paths, dtype))
    timer = make_step_timer(args.device)
    start = time.perf_counter()
    trainer = GRPOTrainer(model=str(paths["model"]), reward_funcs=constant_reward, args=config,
                          train_dataset=dataset, processing_class=load_tokenizer(str(paths["tokenizer"])),
                          callbacks=[timer])
    build_s = time.perf_counter() - start
    gen_s: list[float] = []
    gen_score_s: list[float] = []
    _time_method(trainer, "_generate_single_turn", gen_s, args.device)
    _time_method(trainer, "_generate_and_score_completions", gen_score_s, args.device)
    trainer.train()
    result = summarize(timer, gen_s, gen_score_s, args.warmup_steps)
    result.update({"build_s": build_s, "config": {k: v for k, v in grpo_config_kwargs(args, paths, dtype).items()
                                                  if k not in ("output_dir", "model_init_kwargs")}})
    del trainer
    release_memory()
    return result
