"""Rollout/trainer log-prob mismatch and decode step time, before and after the shared fp32 residual stream
(issue #30 part 1), side by side in one run; prints one JSON object.

    python benchmarks/mismatch_bench.py --out mismatch.json   # H200: 0.5B and 7B shapes, rl_step_bench's workload
    python benchmarks/mismatch_bench.py --quick               # toy shape on CPU (< 1 min)
    python benchmarks/mismatch_bench.py --sweep               # also each module family in fp32, against the truth
    python benchmarks/mismatch_bench.py --table a.json b.json # the markdown table of benchmarks/README.md
See benchmarks/README.md ("mismatch_bench.py") for the workload and every output field.
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import (GSM8K_64, QUICK, QWEN25_05B, build_random_model, emit, environment,  # noqa: E402
                               fill_defaults, gsm8k_prompts, print_tables, sync)

# Qwen2.5-7B's shape (its config.json); random weights
QWEN25_7B = dict(QWEN25_05B, vocab_size=152064, hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                 num_key_value_heads=4, intermediate_size=18944, tie_word_embeddings=False)
SHAPES = {"0.5b": QWEN25_05B, "7b": QWEN25_7B, "quick": QUICK}
# Numerics of both sides: "before" = a 16-bit residual stream (a plain HF bf16 forward, the engine at main's
# commit f4248b1); "after" = the fp32 residual stream the engine and the trainer now share (the default);
# "invariant" = that stream and the batch-invariant kernels (actor_rollout_ref.model.batch_invariant=true).
NUMERICS = ("before", "after", "invariant")
BLOCK_SIZE = 16


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy Qwen2 shape and sizes (CPU, < 1 min)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--shapes", default=None, help=f"comma list out of {sorted(SHAPES)} (default 0.5b,7b; quick: quick)")
    parser.add_argument("--gsm8k", default=str(GSM8K_64), help="jsonl with GSM8K question rows")
    parser.add_argument("--num-prompts", type=int, default=None, help="default 64 (quick: 4)")
    parser.add_argument("--n", type=int, default=None, help="responses per prompt, default 8 (quick: 2)")
    parser.add_argument("--response-length", type=int, default=None, help="forced tokens, default 256 (quick: 8)")
    parser.add_argument("--micro-batch", type=int, default=None, help="rows per trainer forward, default 64 (quick: 4)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2, help="timed generate calls per engine (the fastest counts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-reference", action="store_true",
                        help="skip scoring the default rollout with an fp32 copy of the weights (vs_fp32_reference)")
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print the markdown table of reports this script wrote (benchmarks/README.md) and exit")
    parser.add_argument("--sweep", action="store_true",
                        help="also score it by the trainer with one module family computing in fp32 at a time")
    parser.add_argument("--invariant-families", action="store_true",
                        help="also score the default rollout by the default trainer with one family of its operations "
                             "on the batch-invariant kernels at a time (CUDA)")
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    fill_defaults(args, dict(num_prompts=4, n=2, response_length=8, micro_batch=4, shapes="quick"),
                  dict(num_prompts=64, n=8, response_length=256, micro_batch=64, shapes="0.5b,7b"))
    args.shapes = [s for s in args.shapes.split(",") if s]
    if args.sweep and args.skip_reference:
        parser.error("--sweep measures against the fp32 reference that --skip-reference skips; drop one of them")
    if set(args.shapes) - set(SHAPES):
        parser.error(f"--shapes {','.join(args.shapes)}: unknown shape(s); choose from {sorted(SHAPES)}")
    if (args.num_prompts * args.n) % args.micro_batch:
        parser.error(f"--micro-batch {args.micro_batch} must divide --num-prompts x --n "
                     f"({args.num_prompts} x {args.n}); try {args.num_prompts}")
    return args


def numerics_on(device: str) -> tuple[str, ...]:
    """The numerics `device` runs: the batch-invariant kernels need CUDA."""
    return NUMERICS if torch.device(device).type == "cuda" else NUMERICS[:2]


def qwen2_shape(name: str):
    from transformers import Qwen2Config

    return Qwen2Config(**SHAPES[name])


def build_engine(model, args, numerics: str, prompt_len: int):
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    rows = args.num_prompts * args.n
    max_len = prompt_len + args.response_length
    return LLMEngine(model, dtype=torch.bfloat16, device=args.device, block_size=BLOCK_SIZE, max_num_seqs=rows,
                     max_model_len=max_len, num_kv_blocks=rows * -(-max_len // BLOCK_SIZE) + 1,
                     fp32_residual=numerics != "before", batch_invariant=numerics == "invariant")


def generate(model, prompts: list[list[int]], args, numerics: str) -> dict[str, Any]:
    """One engine with `numerics`: a warm-up call (decode graphs for the full batch), then `repeats` timed calls
    with one seed (the same tokens each time); the fastest call's decode step time counts."""
    from hybridrl.rollout.base import SamplingParams

    checked_before = set(cublas_agreement(numerics))
    engine = build_engine(model, args, numerics, max(map(len, prompts)))
    params = SamplingParams(temperature=args.temperature, n=args.n, max_new_tokens=args.response_length,
                            ignore_eos=True, seed=args.seed)
    engine.generate(prompts, SamplingParams(n=args.n, max_new_tokens=min(4, args.response_length), ignore_eos=True))
    calls = []
    for _ in range(args.repeats):
        engine.sleep()
        engine.wake_up()  # an empty prefix cache: every call prefills alike
        calls.append(engine.generate(prompts, params))
    step_s = [call.metrics["rollout/mean_decode_step_s"] for call in calls]
    out = calls[0]
    del engine
    release(args.device)
    agreement = {key: agrees for key, agrees in cublas_agreement(numerics).items() if key not in checked_before}
    return {"token_ids": out.token_ids, "log_probs": out.log_probs, "decode_step_s": min(step_s),
            "decode_step_s_calls": step_s, "prefill_time_s": out.metrics.get("rollout/prefill_time_s"),
            "cublas_agreement": agreement}


def cublas_agreement(numerics: str) -> dict[str, bool]:
    """The batch-invariant engine's record of the linear layouts where cuBLAS gave its kernel's bits."""
    if numerics != "invariant":
        return {}
    from hybridrl.models.invariant.matmul import cublas_agreement

    return cublas_agreement()


def release(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def trainer_batch(prompts: list[list[int]], token_ids: list[list[int]], n: int, pad_id: int):
    """verl's rows: left-padded prompt | response, masks and positions (every response has the same length)."""
    from hybridrl.utils.batch import Batch

    width = max(map(len, prompts))
    rows, masks = [], []
    for row, response in enumerate(token_ids):
        prompt = prompts[row // n]
        rows.append([pad_id] * (width - len(prompt)) + prompt + response)
        masks.append([0] * (width - len(prompt)) + [1] * (len(prompt) + len(response)))
    mask = torch.tensor(masks)
    responses = torch.tensor(token_ids)
    return Batch({"input_ids": torch.tensor(rows), "attention_mask": mask,
                  "position_ids": (mask.cumsum(1) - 1).clamp(min=0), "responses": responses,
                  "response_mask": torch.ones_like(responses)})


@torch.no_grad()
def trainer_log_probs(model, batch, args) -> tuple[torch.Tensor, float]:
    """The trainer's old_log_prob forward (workers/forward.py: remove_padding, chunked LM head), in
    micro-batches of `--micro-batch` rows, on a bf16 model as rl_step_bench's in-process trainer runs it; timed
    after a warm-up forward of the first micro-batch (Triton compiles its kernels there)."""
    from hybridrl.workers.forward import response_log_probs

    parts = []
    first = batch.split(args.micro_batch)[0]
    response_log_probs(model, first.to(args.device), args.temperature, compute_entropy=False, remove_padding=True)
    sync(args.device)
    start = time.perf_counter()
    for micro in batch.split(args.micro_batch):
        log_probs, _ = response_log_probs(model, micro.to(args.device), args.temperature, compute_entropy=False,
                                          remove_padding=True)
        parts.append(log_probs.float().cpu())
    sync(args.device)
    return torch.cat(parts), time.perf_counter() - start


def compare(rollout: list[list[float]], trainer: torch.Tensor) -> dict[str, Any]:
    """training/rollout_*_diff_* and rollout_corr/* metrics over all response tokens, and the first token
    (sampled in prefill) apart from the rest (decode)."""
    from hybridrl.algorithms.agreement import rollout_agreement_metrics
    from hybridrl.algorithms.rollout_correction import rollout_corr_metrics

    rollout_t = torch.tensor(rollout, dtype=torch.float32)
    mask = torch.ones_like(rollout_t)
    gap = (rollout_t - trainer).abs()
    metrics = {**rollout_agreement_metrics(rollout_t, trainer, mask), **rollout_corr_metrics(trainer, rollout_t, mask)}
    metrics["prefill_token_log_prob_diff_mean"] = gap[:, 0].mean().item()
    metrics["decode_tokens_log_prob_diff_mean"] = gap[:, 1:].mean().item() if gap.shape[1] > 1 else None
    return metrics


def run_shape(name: str, args) -> dict[str, Any]:
    """Both engines' rollouts scored by the trainer with both numerics: the diagonal is before/after, the
    cross terms show what one side's numerics does alone."""
    config = qwen2_shape(name)
    model = build_random_model(config, torch.bfloat16, args.device, seed=args.seed)
    prompts = gsm8k_prompts(config.vocab_size, args.num_prompts, args.gsm8k)
    rollouts = {numerics: generate(model, prompts, args, numerics) for numerics in numerics_on(args.device)}
    result: dict[str, Any] = {"decode_step_s": {k: r["decode_step_s"] for k, r in rollouts.items()},
                              "decode_step_s_calls": {k: r["decode_step_s_calls"] for k, r in rollouts.items()},
                              "prefill_time_s": {k: r["prefill_time_s"] for k, r in rollouts.items()},
                              "trainer_forward_s": {}, "engine_vs_trainer": {},
                              # the batch-invariant engine's linear layouts: whether cuBLAS gave the kernel's bits
                              "cublas_agreement": rollouts.get("invariant", {}).get("cublas_agreement", {})}
    scored = {}
    for trainer_numerics in rollouts:
        trainer = trainer_model(model, trainer_numerics)
        for engine_numerics, rollout in rollouts.items():
            batch = trainer_batch(prompts, rollout["token_ids"], args.n, config.pad_token_id)
            log_probs, seconds = trainer_log_probs(trainer, batch, args)
            key = f"engine_{engine_numerics}__trainer_{trainer_numerics}"
            result["engine_vs_trainer"][key] = compare(rollout["log_probs"], log_probs)
            scored[key] = log_probs
            if engine_numerics == trainer_numerics:
                result["trainer_forward_s"][trainer_numerics] = seconds
        del trainer
        release(args.device)
    if args.invariant_families and "invariant" in rollouts:
        result["invariant_families"] = sweep_invariant_families(model, prompts, rollouts["after"], args)
    if not args.skip_reference:
        batch = trainer_batch(prompts, rollouts["after"]["token_ids"], args.n, config.pad_token_id)
        truth, seconds = reference_log_probs(model, batch, args)
        sides = {"engine_after": torch.tensor(rollouts["after"]["log_probs"], dtype=torch.float32),
                 "trainer_after": scored["engine_after__trainer_after"],
                 "trainer_before": scored["engine_after__trainer_before"]}
        if args.sweep:
            sides |= sweep_fp32_modules(model, batch, args)
        result["vs_fp32_reference"] = {name: (values - truth).abs().mean().item() for name, values in sides.items()}
        result["vs_fp32_reference"]["forward_s"] = seconds
    del model
    release(args.device)
    return result | summary(result)


def trainer_model(model, numerics: str):
    """The trainer's model with `numerics`: a copy of `model` (its weights shared by nothing it changes)."""
    from hybridrl.models.invariant.hf import use_batch_invariant_numerics
    from hybridrl.models.numerics import keep_residual_stream_fp32

    trainer = copy.deepcopy(model)
    if numerics != "before":
        keep_residual_stream_fp32(trainer)
    if numerics == "invariant":
        use_batch_invariant_numerics(trainer)
    return trainer


# the families of `use_batch_invariant_numerics` a sweep switches one at a time (the RoPE table is HF's already)
INVARIANT_FAMILIES = ("linear", "rms_norm", "attention", "lm_head_log_probs")


def invariant_family(name: str):
    """`models/invariant/hf.FAMILIES[name]`: switches that family of a trainer model to the batch-invariant kernels."""
    from hybridrl.models.invariant.hf import FAMILIES

    return FAMILIES[name]


def sweep_invariant_families(model, prompts, rollout: dict[str, Any], args) -> dict[str, Any]:
    """The default rollout scored by the default trainer with one family of its operations on the batch-invariant
    kernels: which of the trainer's kernels the engine's default numerics already follow (mean |delta log-prob|);
    then a rollout whose engine runs the batch-invariant attention kernel and nothing else, scored by the default
    trainer, the trainer with that attention kernel, and the batch-invariant trainer."""
    pad_id = model.config.pad_token_id
    batch = trainer_batch(prompts, rollout["token_ids"], args.n, pad_id)
    out: dict[str, Any] = {}
    for family in INVARIANT_FAMILIES:
        out[family] = score(model, batch, rollout, args, invariant_family(family))
    with engine_attention_invariant():
        both = generate(model, prompts, args, "after")
    batch = trainer_batch(prompts, both["token_ids"], args.n, pad_id)
    out["engine_attention"] = {"decode_step_s": both["decode_step_s"], "prefill_time_s": both["prefill_time_s"],
                               "trainer_after": score(model, batch, both, args, lambda trainer: None),
                               "trainer_attention": score(model, batch, both, args, invariant_family("attention")),
                               "trainer_invariant": score(model, batch, both, args, None)}
    return out


def score(model, batch, rollout: dict[str, Any], args, switch) -> dict[str, float]:
    """`rollout` scored by the default trainer after `switch(trainer)` (None: the batch-invariant trainer)."""
    trainer = trainer_model(model, "after" if switch else "invariant")
    if switch:
        switch(trainer)
    log_probs, seconds = trainer_log_probs(trainer, batch, args)
    del trainer
    release(args.device)
    return {"log_probs_diff_mean": compare(rollout["log_probs"], log_probs)["training/rollout_log_probs_diff_mean"],
            "trainer_forward_s": seconds}


@contextmanager
def engine_attention_invariant():
    """Engines built inside attend by the batch-invariant kernel (prefill and decode; prefill without CUDA graphs,
    as in that mode) and run every other operation as by default."""
    from hybridrl.rollout.engine import batch_invariant, model_runner

    saved = model_runner.select_backend, model_runner.CUDAGraphPrefillRunner
    model_runner.select_backend = lambda device, head_dim: batch_invariant._backend()
    model_runner.CUDAGraphPrefillRunner = lambda *a, **k: saved[1](*a, **{**k, "enabled": False})
    try:
        yield
    finally:
        model_runner.select_backend, model_runner.CUDAGraphPrefillRunner = saved


def reference_log_probs(model, batch, args) -> tuple[torch.Tensor, float]:
    """The exact forward of the same bf16 weights (an fp32 copy, fp32 matmuls without TF32): how far each side
    is from the truth (`vs_fp32_reference`, mean |delta log-prob|). Two sides each this far off in independent
    directions differ by about sqrt(2) times it; a gap well below that needs both sides to make the same
    rounding errors, not a more precise one."""
    reference = copy.deepcopy(model).float()
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return trainer_log_probs(reference, batch, args)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
        del reference
        release(args.device)


# module families of an HF Qwen2 decoder, and whether their output goes back to bf16 (the LM head's logits
# stay fp32: the log-softmax reads them in fp32 anyway)
FP32_FAMILIES = {"attention": (lambda m: [layer.self_attn for layer in m.model.layers], True),
                 "mlp": (lambda m: [layer.mlp for layer in m.model.layers], True),
                 "lm_head": (lambda m: [m.lm_head], False)}


def sweep_fp32_modules(model, batch, args) -> dict[str, torch.Tensor]:
    """The trainer's log-probs (fp32 residual stream) with one family computing in fp32 from its (still
    bf16-rounded) inputs: what each family's internal rounding adds to the error against the truth."""
    from hybridrl.models.numerics import keep_residual_stream_fp32

    hooks = keep_residual_stream_fp32(model)
    out = {}
    try:
        for family, (modules, round_output) in FP32_FAMILIES.items():
            with computing_in_fp32(modules(model), round_output):
                out[f"trainer_after_fp32_{family}"], _ = trainer_log_probs(model, batch, args)
    finally:
        hooks.remove()
    return out


@contextmanager
def computing_in_fp32(modules: list[torch.nn.Module], round_output: bool):
    """`modules` run on fp32 copies of their parameters (the originals, possibly tied to other modules, are
    put back after) and fp32 inputs; their outputs rounded back to bf16 when `round_output`."""
    originals, handles = [], []
    for module in modules:
        for owner in module.modules():
            for name, param in list(owner._parameters.items()):
                if param is not None and param.is_floating_point():
                    originals.append((owner, name, param))
                    owner._parameters[name] = torch.nn.Parameter(param.detach().float(), requires_grad=False)
        handles.append(module.register_forward_pre_hook(
            lambda _, args, kwargs: (cast(args, torch.float32), cast(kwargs, torch.float32)), with_kwargs=True))
        if round_output:
            handles.append(module.register_forward_hook(lambda _, __, output: cast(output, torch.bfloat16)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for owner, name, param in originals:
            owner._parameters[name] = param


def cast(value, dtype: torch.dtype):
    """`value` with every floating-point tensor in it (nested in tuples, lists, dicts) cast to `dtype`."""
    return tree_map(lambda leaf: leaf.to(dtype) if torch.is_tensor(leaf) and leaf.is_floating_point() else leaf, value)


def summary(result: dict[str, Any]) -> dict[str, Any]:
    pair = result["engine_vs_trainer"]
    diff = {k: pair[f"engine_{k}__trainer_{k}"]["training/rollout_log_probs_diff_mean"] for k in result["decode_step_s"]}
    step = result["decode_step_s"]
    return {"log_probs_diff_mean": diff, **{f"{k}_over_before": {
        "log_probs_diff_mean": diff[k] / diff["before"] if diff["before"] else None,
        "decode_step_s": step[k] / step["before"] if step["before"] else None} for k in list(diff)[1:]}}


def markdown_table(reports: list[dict[str, Any]]) -> str:
    """One row per shape of each report: the engine/trainer gap per numerics, each side's distance from the fp32
    reference, the trainer's with one family in fp32 (`--sweep`), and the decode step and trainer forward times."""
    families = [f"trainer_after_fp32_{family}" for family in FP32_FAMILIES]
    lines = ["| shape | engine vs trainer before | after | batch-invariant | engine vs fp32 | trainer vs fp32 | trainer "
             "(bf16 stream) vs fp32 | " + " | ".join(f"trainer, {family} in fp32, vs fp32" for family in FP32_FAMILIES)
             + " | decode step ms before / after / batch-invariant | trainer forward s after / batch-invariant |",
             "|---|---|---|---|---|---|---|" + "---|" * len(families) + "---|---|"]
    for report in reports:
        for name, shape in report["shapes"].items():
            gap, reference = shape["log_probs_diff_mean"], shape.get("vs_fp32_reference", {})
            step, forward = shape["decode_step_s"], shape["trainer_forward_s"]
            cells = [gap.get("invariant")] + [reference.get(key) for key in ("engine_after", "trainer_after",
                                                                            "trainer_before", *families)]
            steps = " / ".join("-" if step.get(k) is None else f"{step[k] * 1e3:.3f}" for k in NUMERICS)
            forwards = " / ".join("-" if forward.get(k) is None else f"{forward[k]:.2f}" for k in NUMERICS[1:])
            lines.append(f"| {shape_label(report, name)} | {gap['before']:.4f} | {gap['after']:.4f} | "
                         + " | ".join("-" if cell is None else f"{cell:.4f}" for cell in cells)
                         + f" | {steps} | {forwards} |")
    tables = ["\n".join(lines)]
    if any("invariant_families" in shape for report in reports for shape in report["shapes"].values()):
        tables.append(families_table(reports))
    return "\n\n".join(tables)


def shape_label(report: dict[str, Any], name: str) -> str:
    workload = report["workload"]
    return f"{name}, {workload['num_prompts']} x {workload['n']}"


def families_table(reports: list[dict[str, Any]]) -> str:
    """`--invariant-families`: the default rollout's gap to the default trainer with one family of operations on the
    batch-invariant kernels, and to the batch-invariant trainer; then the rollout of an engine that attends by the
    batch-invariant kernel (its decode step, its gap to the default trainer, to the trainer with that attention
    kernel, to the batch-invariant trainer)."""
    lines = ["| shape | default trainer | " + " | ".join(f"+ {family}" for family in INVARIANT_FAMILIES)
             + " | batch-invariant trainer | engine attention: decode step ms (default) | vs default trainer "
               "| vs trainer + attention | vs batch-invariant trainer |",
             "|---|---|" + "---|" * len(INVARIANT_FAMILIES) + "---|---|---|---|---|"]
    for report in reports:
        for name, shape in report["shapes"].items():
            families = shape.get("invariant_families")
            if families is None:
                continue
            pairs = shape["engine_vs_trainer"]
            gaps = [pairs["engine_after__trainer_after"]] + [families[f] for f in INVARIANT_FAMILIES]
            gaps.append(pairs["engine_after__trainer_invariant"])
            cells = [f"{gap.get('log_probs_diff_mean', gap.get('training/rollout_log_probs_diff_mean')):.4f}"
                     for gap in gaps]
            engine = families.get("engine_attention")
            if engine:
                cells.append(f"{engine['decode_step_s'] * 1e3:.3f} ({shape['decode_step_s']['after'] * 1e3:.3f})")
                cells += [f"{engine[k]['log_probs_diff_mean']:.4f}"
                          for k in ("trainer_after", "trainer_attention", "trainer_invariant")]
            else:
                cells += ["-"] * 4
            lines.append(f"| {shape_label(report, name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.table:
        return print_tables(args.table, markdown_table)
    results: dict[str, Any] = {
        "workload": {"num_prompts": args.num_prompts, "n": args.n, "response_length": args.response_length,
                     "micro_batch": args.micro_batch, "temperature": args.temperature, "dtype": "bfloat16",
                     "seed": args.seed, "repeats": args.repeats,
                     "shapes": {name: {k: SHAPES[name][k] for k in ("hidden_size", "num_hidden_layers", "vocab_size",
                                                                    "intermediate_size", "tie_word_embeddings")}
                                for name in args.shapes}},
        "environment": environment(args.device), "shapes": {}}
    for name in args.shapes:
        start = time.perf_counter()
        results["shapes"][name] = run_shape(name, args)
        results["shapes"][name]["wall_s"] = time.perf_counter() - start
    emit(results, args.out)
    return results


if __name__ == "__main__":
    main()
