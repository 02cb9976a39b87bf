"""Console line: verl's `step:N - key:value` format and the policy → value → reward → system → rest order."""

from __future__ import annotations

import math

from hybridrl.logging.console import ConsoleTracker, format_console_line, order_metrics


def test_order_groups_policy_value_reward_system_then_rest():
    metrics = {
        "zzz/custom": 1.0, "perf/throughput": 1.0, "timing_s/step": 1.0, "training/global_step": 1,
        "reward/extra": 1.0, "prompt_length/mean": 1.0, "response_length/mean": 1.0, "val-aux/x/std@2": 1.0,
        "val-core/openai/gsm8k/reward/mean@1": 1.0, "critic/rewards/mean": 1.0, "critic/score/mean": 1.0,
        "critic/returns/mean": 1.0, "critic/advantages/mean": 1.0, "critic/lr": 1.0, "critic/grad_norm": 1.0,
        "critic/vf_explained_var": 1.0, "critic/values/mean": 1.0, "critic/vpred_mean": 1.0,
        "critic/vf_loss": 1.0, "actor/pg_loss": 1.0, "actor/entropy": 1.0, "timing_per_token_ms/gen": 1.0,
        "abc/first_of_rest": 1.0,
    }
    assert [key for key, _ in order_metrics(metrics)] == [
        "actor/entropy", "actor/pg_loss",
        "critic/vf_loss", "critic/vpred_mean", "critic/values/mean", "critic/vf_explained_var",
        "critic/grad_norm", "critic/lr", "critic/advantages/mean", "critic/returns/mean",
        "critic/score/mean", "critic/rewards/mean", "val-core/openai/gsm8k/reward/mean@1", "val-aux/x/std@2",
        "response_length/mean", "prompt_length/mean", "reward/extra",
        "training/global_step", "timing_s/step", "timing_per_token_ms/gen", "perf/throughput",
        "abc/first_of_rest", "zzz/custom",
    ]


def test_format_line_numbers_and_order():
    line = format_console_line(3, {"timing_s/step": 12.3456789, "actor/pg_loss": -0.000123456789,
                                   "training/global_step": 3, "critic/score/mean": math.nan})
    assert line == ("step:3 - actor/pg_loss:-0.000123457 - critic/score/mean:nan - "
                    "training/global_step:3 - timing_s/step:12.3457")


def test_console_tracker_prints_one_grepable_line(capsys):
    ConsoleTracker().log({"critic/score/mean": 0.5}, step=7)
    out = capsys.readouterr().out
    assert out == "step:7 - critic/score/mean:0.5\n"
