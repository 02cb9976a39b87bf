"""benchmarks/rollout_bench.py end to end at --quick size on CPU, and its shared helpers (benchmarks/common.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import common  # noqa: E402


def load_bench():
    try:
        from hybridrl.rollout.engine.llm_engine import LLMEngine  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"LLMEngine is not importable yet ({exc}); the benchmark needs it")
    spec = importlib.util.spec_from_file_location("rollout_bench", REPO / "benchmarks" / "rollout_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_end_to_end(tmp_path, capsys):
    bench = load_bench()
    out = tmp_path / "rollout.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # toy matmuls: thread sync costs more than it buys on shared CPUs
    try:
        bench.main(["--quick", "--device", "cpu", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    report = json.loads(capsys.readouterr().out)  # stdout is exactly one JSON object
    assert report == json.loads(out.read_text())
    main, seqs = report["main"], 4 * 2
    assert main["engine"]["generated_tokens"] == main["hf"]["generated_tokens"] == seqs * 8
    assert main["hf_static"]["generated_tokens"] == seqs * 8  # HF's static-cache path: the stronger peer
    assert (main["hf"]["cache"], main["hf_static"]["cache"], main["hf_static"]["compiled"]) == ("dynamic", "static",
                                                                                                 False)  # CPU: eager
    for peer in ("engine", "hf", "hf_static"):  # every peer warmed by a full-size call before the timed one
        assert main[peer]["warmup_wall_s"] > 0 and main[peer]["gen_tok_s"] > 0
    assert main["engine_over_hf"] == main["engine"]["gen_tok_s"] / main["hf"]["gen_tok_s"]  # within this run
    assert main["engine_over_hf_static"] == main["engine"]["gen_tok_s"] / main["hf_static"]["gen_tok_s"]
    assert "full-size call" in main["warmup"]
    assert main["engine"]["metrics"]["rollout/mean_decode_step_s"] > 0
    assert "4.3e12" in main["roofline"]["formula"] and 0 < main["roofline"]["fraction_of_roofline"]
    varied = report["varied_lengths"]["engine"]["response_length"]
    assert 1 <= varied["min"] <= varied["max"] <= 16
    caching = report["prefix_caching"]
    assert set(caching) == {"n2_prefix_on", "n2_prefix_off", "n1_prefix_on", "n1_prefix_off"}
    assert caching["n2_prefix_off"]["rollout/prefix_cache_hit_tokens"] == 0
    assert caching["n2_prefix_on"]["rollout/prefix_cache_hit_tokens"] > 0  # the n samples share the prompt
    # n=1 still shares the chat template's system-prompt blocks across prompts, but far less than n=2.
    assert caching["n1_prefix_on"]["rollout/prefix_cache_hit_tokens"] < caching["n2_prefix_on"][
        "rollout/prefix_cache_hit_tokens"]


def test_hash_tokenize_is_deterministic_and_realistic():
    text = "Natalia sold clips to 48 of her friends in April."
    ids = common.hash_tokenize(text, 151936, reserved=16)
    assert ids == common.hash_tokenize(text, 151936, reserved=16)
    assert len(ids) == -(-len(text) // 4) and all(16 <= i < 151936 for i in ids)
    lengths = [len(p) for p in common.gsm8k_prompts(151936, 64)]
    assert 80 <= sum(lengths) / len(lengths) <= 140  # real Qwen2.5 GSM8K prompts average ~105 tokens


def test_gsm8k_loader(tmp_path):
    questions = common.load_gsm8k_questions(common.GSM8K_64, 64)
    assert len(questions) == 64 and questions[0].startswith("Natalia sold clips")
    with pytest.raises(FileNotFoundError, match="--gsm8k"):
        common.load_gsm8k_questions(tmp_path / "missing.jsonl")
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match="needs 64"):
        common.load_gsm8k_questions(short, 64)


def test_qwen_shape_and_byte_counts():
    config = common.qwen2_config()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.vocab_size) == (896, 24, 14, 2, 151936)
    rope_theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta") or config.rope_theta
    assert config.tie_word_embeddings and rope_theta == 1e6
    assert common.kv_bytes_per_token(config, torch.bfloat16) == 12288  # perf.md §4.1
    tied = common.build_random_model(common.qwen2_config(quick=True), torch.float32, "cpu")
    assert common.model_bytes(tied) == 4 * sum(p.numel() for p in tied.parameters())  # tied counted once
