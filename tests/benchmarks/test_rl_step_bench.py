"""benchmarks/rl_step_bench.py at --quick size on CPU (TRL part only when TRL is installed) and its setup."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import common, rl_step_bench, rl_step_setup  # noqa: E402

PHASES = ["gen", "old_log_prob", "ref", "update_actor", "update_weights"]


def test_quick_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "rl_step.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # toy matmuls: thread sync costs more than it buys on shared CPUs
    try:
        rl_step_bench.main(["--quick", "--out", str(out), "--workdir", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    report = json.loads(capsys.readouterr().out)  # stdout is exactly one JSON object
    assert report == json.loads(out.read_text())
    workload = report["workload"]
    assert workload["num_sequences"] == 8 and workload["prompt_tokens"]["min"] > 50  # chat template + question
    for mode in ("hybrid", "hybrid_offload", "separate"):
        run = report["hybridrl"][mode]
        assert run["tokens_per_step"] == workload["tokens_per_step"]  # forced length: 8 x 8 response tokens
        assert run["response_length/mean"] == 8 and run["steady_steps"] == [2, 3]
        assert run["tokens_per_s"] > 0 and len(run["step_s_all"]) == 3
        assert run["phases_tracked"] == PHASES and run["kv_cache_gb"] > 0
        # One optimizer step over one mini-batch: the on-policy shortcut takes old log-probs from the update.
        assert all(run[f"timing_s/{phase}"] > 0 for phase in PHASES if phase != "old_log_prob")
        assert run["timing_s/old_log_prob"] == 0 and run["training/rollout_probs_diff_mean"] >= 0
    assert report["hybridrl"]["separate"]["kv_cache_during_training"] is True
    trl = report["trl"]
    if importlib.util.find_spec("trl") is None:
        assert trl["error"].startswith("TRL not importable")
    else:
        assert "error" not in trl, trl
        assert trl["tokens_per_step"] == workload["tokens_per_step"]  # same prompts, same forced length
    assert set(report["comparison"]) >= {"hybridrl_over_trl_tokens_per_s", "peak_memory_gb",
                                         "hybrid_offload_over_separate_peak"}
    assert workload["hybridrl_overrides"] == []


@pytest.mark.slow
def test_one_rank_group_runs_the_roles_in_a_rank(tmp_path, capsys):
    """--one-rank-group: the one-device workload through a one-rank worker group, which reports its rank times."""
    rl_step_bench.main(["--quick", "--only", "hybrid", "--steps", "2", "--one-rank-group", "--workdir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    run = report["hybridrl"]["hybrid"]
    assert report["workload"]["one_rank_group"] is True
    assert 0 < run["timing_s/update_actor_rank"] <= run["timing_s/update_actor"]  # only ranks report these
    assert run["tokens_per_s"] > 0


def test_stand_in_tokenizer_round_trips_through_a_saved_dir(tmp_path):
    from hybridrl.models.hf import load_tokenizer

    config = common.qwen2_config(quick=True)
    rows = rl_step_setup.gsm8k_rows(4)
    tokenizer = rl_step_setup.write_model_dir(tmp_path / "model", tmp_path / "tok", config, rows, torch.float32)
    loaded = load_tokenizer(str(tmp_path / "tok"))
    assert len(loaded) == config.vocab_size and loaded.eos_token_id == config.eos_token_id
    assert rl_step_setup.prompt_lengths(loaded, rows) == rl_step_setup.prompt_lengths(tokenizer, rows)
    ids = loaded.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=True,
                                     return_dict=True)["input_ids"]
    assert loaded.decode(ids) == rl_step_setup.prompt_texts(rows)[:1][0]  # lossless: 4-char chunks + specials
    text = common.QWEN_CHAT.format(content=rows[0]["prompt"][0]["content"])
    assert abs(len(ids) - len(common.hash_tokenize(text, config.vocab_size))) < 10  # same ~4 chars per token


def test_too_many_chunks_for_a_toy_vocab_is_a_clear_error():
    config = common.qwen2_config(quick=True)
    with pytest.raises(ValueError, match="do not fit a vocabulary of 1024"):
        rl_step_setup.build_stand_in_tokenizer(rl_step_setup.prompt_texts(rl_step_setup.gsm8k_rows(64)), config)


def test_roofline_matches_perf_md_shapes():
    config = common.qwen2_config()
    ceiling = rl_step_bench.roofline(config, num_seqs=512, prompt_len=112, response_len=256)
    tokens = 512 * (112 + 256)
    n_body = 357.8e6  # perf.md §4.1: Qwen2.5-0.5B transformer-body matmul params
    forward = 2 * n_body * tokens + 2 * 151936 * 896 * 512 * 256
    assert ceiling["update_actor_s"] == pytest.approx(4 * forward / 790e12, rel=1e-3)
    assert ceiling["tokens_per_s"] == pytest.approx(tokens / ceiling["step_s"])
    assert 50e3 < ceiling["tokens_per_s"] < 300e3  # perf.md §4.3: ~130-190k tok/s ceilings for this model


def test_the_median_step_ignores_a_one_off_slow_step():
    """Two steady steps cannot tell a median from a mean: here one slow step moves the mean, not the median."""
    from benchmarks import rl_step_hybridrl

    steps = [{"timing_s/step": seconds, "perf/total_num_tokens": 100} for seconds in (9.0, 1.0, 1.0, 5.0)]
    out = rl_step_hybridrl.summarize(steps, warmup=1)
    assert out["step_s_median"] == 1.0 and out["tokens_per_s_median"] == 100.0
    assert out["step_s"] == pytest.approx(7 / 3)
