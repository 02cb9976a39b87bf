"""An in-process reward model scoring one step's rows: on the controller's CPU in fp32 (how it ran before session
14) against the trainer's default now, the controller's GPU in bf16 (`reward_model.device_ids`, fsdp_config).

    python benchmarks/reward_model_bench.py --out results/reward_model_h200.json
    python benchmarks/reward_model_bench.py --quick          # toy sizes, CPU only (test smoke run)

The reward model is Qwen2.5-0.5B-shaped with one label (random weights: the time does not depend on them),
loaded from disk by `RewardModelWorker` as the trainer loads it. Rows are the rl_step workload's: GSM8K
prompts (~110 stand-in tokens) + `--response-tokens` response tokens. The CPU scores `--cpu-rows` rows (it is
slow), the GPU the whole `--rows`, with `--micro-batch` rows per forward and again with `--max-tokens` of padded
width per forward (reward_model.use_dynamic_bsz); each reports rows per second, and the speedups are on that rate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment, fill_defaults, gsm8k_prompts, qwen2_config, timed  # noqa: E402
from hybridrl.utils.batch import Batch  # noqa: E402
from hybridrl.workers.reward_model import RewardModelWorker  # noqa: E402

DTYPES = {"cpu": torch.float32, "cuda": torch.bfloat16}  # the trainer's defaults on each (fsdp_config's compute)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes, CPU only")
    parser.add_argument("--rows", type=int, default=None, help="rows the GPU scores, default 512 (quick: 8)")
    parser.add_argument("--cpu-rows", type=int, default=None, help="rows the CPU scores, default 16 (quick: 8)")
    parser.add_argument("--response-tokens", type=int, default=None, help="default 256 (quick: 16)")
    parser.add_argument("--micro-batch", type=int, default=8, help="reward_model.micro_batch_size_per_gpu")
    parser.add_argument("--max-tokens", type=int, default=32768,
                        help="the GPU's second run: use_dynamic_bsz with this forward_max_token_len_per_gpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed scorings per device (the median is kept)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    fill_defaults(args, {"rows": 8, "cpu_rows": 8, "response_tokens": 16},
                  {"rows": 512, "cpu_rows": 16, "response_tokens": 256})
    return args


def save_reward_model(quick: bool, directory: str) -> int:
    """A random one-label token-classification model of the benchmark's shape, saved as an HF directory."""
    from transformers import AutoModelForTokenClassification

    config = qwen2_config(quick, num_labels=1)
    torch.manual_seed(0)
    AutoModelForTokenClassification.from_config(config).save_pretrained(directory)
    return config.vocab_size


def step_rows(vocab_size: int, rows: int, response_tokens: int) -> Batch:
    """verl-layout rows: left-padded GSM8K prompts + random responses (no padding inside responses)."""
    prompts = gsm8k_prompts(vocab_size, num_prompts=64)
    prompts = [prompts[i % len(prompts)] for i in range(rows)]
    width = max(map(len, prompts))
    input_ids = torch.zeros(rows, width + response_tokens, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):width] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    responses = torch.randint(16, vocab_size, (rows, response_tokens), generator=torch.Generator().manual_seed(1))
    input_ids[:, width:] = responses
    return Batch({"input_ids": input_ids, "attention_mask": mask, "responses": responses,
                  "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def runs(devices: list[torch.device], max_tokens: int) -> list[tuple[str, torch.device, int | None]]:
    """(report key, device, token budget): each device with micro_batch rows; a GPU also with the budget."""
    out = [(device.type, device, None) for device in devices]
    return out + [("cuda_token_budget", device, max_tokens) for device in devices if device.type == "cuda"]


def time_scoring(worker: RewardModelWorker, batch: Batch, device: torch.device, repeats: int) -> dict[str, float]:
    width = batch["input_ids"].shape[1]
    worker.compute_rm_score(batch.index(slice(0, worker.rows_per_forward(width))))  # warm-up: kernels, allocator
    times: dict[int, float] = {}
    for repeat in range(repeats):
        with timed(device, times, repeat):
            worker.compute_rm_score(batch)
    seconds = statistics.median(times.values())
    return {"rows": len(batch), "score_s_median": seconds, "rows_per_s": len(batch) / seconds,
            "score_s_all": list(times.values())}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    devices = [torch.device("cpu")] + ([torch.device("cuda", 0)] if torch.cuda.is_available() and not args.quick
                                       else [])
    result = {"benchmark": "reward_model_bench", "environment": environment(str(devices[-1])),
              "workload": {"response_tokens": args.response_tokens, "micro_batch": args.micro_batch,
                           "shape": "quick" if args.quick else "Qwen2.5-0.5B, one label",
                           "dtype": {kind: str(dtype).removeprefix("torch.") for kind, dtype in DTYPES.items()}}}
    with tempfile.TemporaryDirectory() as directory:
        vocab_size = save_reward_model(args.quick, directory)
        for name, device, max_tokens in runs(devices, args.max_tokens):
            rows = args.cpu_rows if device.type == "cpu" else args.rows
            worker = RewardModelWorker(directory, tokenizer=None, micro_batch_size=args.micro_batch,
                                       devices=[device], dtype=DTYPES[device.type], max_tokens=max_tokens)
            batch = step_rows(vocab_size, rows, args.response_tokens)
            result[name] = time_scoring(worker, batch, device, args.repeats)
            result[name]["rows_per_forward"] = worker.rows_per_forward(batch["input_ids"].shape[1])
            del worker
    for name in ("cuda", "cuda_token_budget"):
        if name in result:
            result[f"{name}_speedup_rows_per_s"] = result[name]["rows_per_s"] / result["cpu"]["rows_per_s"]
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
