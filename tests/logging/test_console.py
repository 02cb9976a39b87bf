"""The console's step line: compact and grouped (policy → value → reward → validation → system) by default,
verl's `step:N - key:value` line with HYBRIDRL_CONSOLE=verl."""

from __future__ import annotations

import math

import pytest

from hybridrl.logging.console import ConsoleTracker, format_console_line, format_step_line, order_metrics

STEP = {  # a PPO step's metrics as the trainer logs them (a few of the ~70 keys)
    "actor/pg_loss": -0.0123456, "actor/kl_loss": 0.00123, "actor/ppo_kl": 0.0004, "actor/entropy": 1.23456,
    "actor/pg_clipfrac": 0.0213, "actor/grad_norm": 0.8456, "actor/lr": 1e-6, "critic/vf_loss": 0.3125,
    "critic/vf_explained_var": 0.4219, "critic/score/mean": 0.625, "critic/score/max": 1.0,
    "response_length/mean": 143.4, "response_length/clip_ratio": 0.03, "timing_s/step": 3.1234, "timing_s/gen": 1.2,
    "timing_s/update_actor": 1.0, "perf/throughput": 12432.0, "perf/max_memory_allocated_gb": 9.21,
    "global_seqlen/mean": 5.0, "training/global_step": 12,
}


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


def test_step_line_is_compact_grouped_and_has_units():
    assert format_step_line(12, STEP) == (
        "step:12 | policy pg_loss -0.01235  kl_ref 0.00123  ppo_kl 0.0004  entropy 1.235  clip 2.1%  grad 0.846"
        " | value vf_loss 0.3125  expl_var 0.422 | reward score 0.625  len 143 tok  len_clip 3.0%"
        " | system step 3.12 s  gen 1.20 s  12.4k tok/s  mem 9.2 GB")


def test_step_line_adds_validation_and_leaves_out_absent_groups():
    metrics = {"critic/score/mean": 0.5, "val-core/openai/gsm8k/reward/mean@1": 0.845,
               "val-core/openai/gsm8k/reward/best@4/mean": 0.9, "val-aux/openai/gsm8k/reward/std@4": 0.1,
               "timing_s/step": float("nan")}
    assert format_step_line(3, metrics) == ("step:3 | reward score 0.500 | val openai/gsm8k reward@1 0.845"
                                            " | system step nan")


def test_console_tracker_prints_one_compact_line(capsys, monkeypatch):
    monkeypatch.delenv("HYBRIDRL_CONSOLE", raising=False)
    ConsoleTracker().log({"critic/score/mean": 0.5}, step=7)
    assert capsys.readouterr().out == "step:7 | reward score 0.500\n"


def test_verl_style_prints_every_key(capsys, monkeypatch):
    monkeypatch.setenv("HYBRIDRL_CONSOLE", "verl")
    ConsoleTracker().log({"critic/score/mean": 0.5, "zz/other": 1}, step=7)
    assert capsys.readouterr().out == "step:7 - critic/score/mean:0.5 - zz/other:1\n"
    monkeypatch.setenv("HYBRIDRL_CONSOLE", "fancy")
    with pytest.raises(ValueError, match="HYBRIDRL_CONSOLE='fancy'"):
        ConsoleTracker()
