"""The controller's 2-rank group call beside a background reward thread: does the thread starve it of the GIL?

    python benchmarks/controller_gil_bench.py --out gil.json     # the RL step's shapes (512 x 415 tokens)
    python benchmarks/controller_gil_bench.py --quick            # toy shapes (test smoke run)

`call_sharded` sends a batch shaped like the ref phase's input to 2 CPU (gloo) ranks whose method returns
(rows, 256) zeros: what is timed is the controller's side (sharding, pipes, pickling, concatenation). The
conditions: alone; beside a thread that decodes the step's 512 x 256 response tokens with the benchmark's
stand-in tokenizer (the async reward's first step) through transformers' `batch_decode` (what the reward
worker ran before session 11), submitted plainly and through `hybridrl.utils.threads.submit_responsive`
(switch interval 0.2 ms while it runs, as the trainer does); and beside the reward worker's own
`decode_responses` (the Rust backend's `decode_batch`, which releases the GIL), submitted as the trainer does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment, qwen2_config  # noqa: E402
from benchmarks.rl_step_setup import build_stand_in_tokenizer, gsm8k_rows, prompt_texts  # noqa: E402
from hybridrl.distributed.local_launcher import LocalWorkerGroup  # noqa: E402
from hybridrl.utils.batch import Batch  # noqa: E402
from hybridrl.utils.threads import submit_responsive  # noqa: E402
from hybridrl.workers.reward import decode_responses  # noqa: E402


class ReplyRank:
    """A rank whose forward is free: it returns (rows, response_length) zeros."""

    def ref(self, batch: Batch) -> Batch:
        return Batch(tensors={"ref_log_prob": torch.zeros(len(batch), batch["responses"].shape[1])})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy shapes, one repeat")
    parser.add_argument("--repeats", type=int, default=None, help="calls per condition, default 5 (quick: 1)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.rows, args.seq_len, args.response_len = (16, 48, 16) if args.quick else (512, 415, 256)
    args.prompts = 4 if args.quick else 64  # the stand-in tokenizer's vocabulary comes from these prompts
    args.repeats = args.repeats or (1 if args.quick else 5)
    return args


def step_batch(rows: int, seq_len: int, response_len: int) -> Batch:
    ids = torch.zeros(rows, seq_len, dtype=torch.long)
    return Batch(tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": ids.clone(),
                          "responses": torch.zeros(rows, response_len, dtype=torch.long),
                          "response_mask": torch.ones(rows, response_len)})


def timed_calls(group, batch: Batch, repeats: int, start_thread=None) -> list[float]:
    """Seconds per call_sharded; with `start_thread`, a fresh decode starts right before each call."""
    seconds = []
    for _ in range(repeats):
        future = start_thread() if start_thread else None
        start = time.perf_counter()
        group.call_sharded("ref", batch)
        seconds.append(time.perf_counter() - start)
        if future is not None:
            future.result()
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    return {"mean_ms": statistics.mean(seconds) * 1e3, "median_ms": statistics.median(seconds) * 1e3,
            "min_ms": min(seconds) * 1e3, "max_ms": max(seconds) * 1e3}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    tokenizer = build_stand_in_tokenizer(prompt_texts(gsm8k_rows(args.prompts)), qwen2_config())
    responses = torch.randint(0, tokenizer.vocab_size, (args.rows, args.response_len))
    decode = lambda: tokenizer.batch_decode(responses, skip_special_tokens=True)  # noqa: E731
    scored = Batch(tensors={"responses": responses, "response_mask": torch.ones_like(responses)})
    reward_decode = lambda: decode_responses(tokenizer, scored)  # noqa: E731
    batch = step_batch(args.rows, args.seq_len, args.response_len)
    results: dict[str, Any] = {}
    with LocalWorkerGroup(ReplyRank, {}, world_size=2, role="ref") as group, \
            ThreadPoolExecutor(max_workers=1) as pool:
        timed_calls(group, batch, 2)  # warm-up
        start = time.perf_counter()
        decode()
        results["decode_alone_ms"] = (time.perf_counter() - start) * 1e3
        results["alone"] = summary(timed_calls(group, batch, args.repeats))
        results["beside_decode_thread"] = summary(timed_calls(group, batch, args.repeats,
                                                              lambda: pool.submit(decode)))
        results["beside_decode_thread_responsive"] = summary(timed_calls(group, batch, args.repeats,
                                                                         lambda: submit_responsive(pool, decode)))
        start = time.perf_counter()
        reward_decode()
        results["reward_decode_alone_ms"] = (time.perf_counter() - start) * 1e3
        results["beside_reward_decode_responsive"] = summary(
            timed_calls(group, batch, args.repeats, lambda: submit_responsive(pool, reward_decode)))
    report = {"benchmark": "controller_gil", "environment": environment("cpu"),
              "shapes": {"rows": args.rows, "seq_len": args.seq_len, "response_len": args.response_len,
                         "ranks": 2, "repeats": args.repeats}, **results}
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
