"""A Megatron-LM checkpoint (TP=2, classic layout) as `actor_rollout_ref.model.path`."""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from hybridrl.config import ConfigError, load_config
from hybridrl.models.megatron import main_convert
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> str:
    from hybridrl.models.tiny import save_tiny_model_dir

    return save_tiny_model_dir(str(tmp_path_factory.mktemp("hf_gqa2")), arch="qwen2", seed=1, chars="0123456789+=",
                               hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64,
                               max_position_embeddings=64)


@pytest.fixture(scope="module")
def megatron_dir(tmp_path_factory, hf_dir) -> str:
    out = str(tmp_path_factory.mktemp("megatron_tp2"))
    assert main_convert(["hf-to-megatron", "--input", hf_dir, "--output", out, "--tp", "2"]) == 0
    return out


def test_grpo_runs_from_a_megatron_checkpoint(tmp_path, megatron_dir, hf_dir, arithmetic_files):
    overrides = tiny_run_overrides(megatron_dir, arithmetic_files, str(tmp_path), algo="gae", steps=1,
                                   extra=[f"actor_rollout_ref.model.tokenizer_path={hf_dir}"])
    trainer = PPOTrainer(load_config(overrides))
    reference = AutoModelForCausalLM.from_pretrained(hf_dir)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(local_worker(trainer).actor.model.eval()(ids).logits, reference(ids).logits)
    trainer.fit()
    record = json.loads(open(os.path.join(str(tmp_path), "metrics.jsonl")).readline())
    assert record["critic/vf_loss"] >= 0.0


def test_megatron_path_without_tokenizer_path_is_a_config_error(tmp_path, megatron_dir, arithmetic_files):
    with pytest.raises(ConfigError, match="tokenizer_path"):
        PPOTrainer(load_config(tiny_run_overrides(megatron_dir, arithmetic_files, str(tmp_path))))
