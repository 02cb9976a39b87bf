"""Model-based rewards and a frozen remote critic through `hybridrl serve` on loopback (real HTTP)."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.models.hf import load_tokenizer, load_value_model
from hybridrl.serving.client import RemoteScoringError
from hybridrl.serving.server import serve
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import tiny_run_overrides


@pytest.fixture(scope="module")
def value_model_dir(tmp_path_factory, arith_model_dir) -> str:
    """A token-classification model (one label) saved once, so in-process and served copies agree."""
    out = str(tmp_path_factory.mktemp("rm"))
    torch.manual_seed(3)
    load_value_model(arith_model_dir).save_pretrained(out)
    load_tokenizer(arith_model_dir).save_pretrained(out)
    return out


@pytest.fixture
def server(value_model_dir):
    httpd = serve(value_model_dir, port=0, kind="reward")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run_scores(overrides: list[str], out_dir: str) -> list[float]:
    PPOTrainer(load_config(overrides)).fit()
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["critic/score/mean"] for line in f]


def test_remote_reward_model_scores_equal_in_process(tmp_path, server, value_model_dir, arith_model_dir,
                                                     arithmetic_files):
    _, url = server
    local_dir, remote_dir = str(tmp_path / "local"), str(tmp_path / "remote")
    base = ["reward_model.enable=true", "reward_model.micro_batch_size_per_gpu=8"]
    local = run_scores(tiny_run_overrides(arith_model_dir, arithmetic_files, local_dir, steps=1,
                                          extra=base + [f"reward_model.model.path={value_model_dir}"]), local_dir)
    remote = run_scores(tiny_run_overrides(arith_model_dir, arithmetic_files, remote_dir, steps=1,
                                           extra=base + [f"reward_model.model.path={url}",
                                                         "reward_model.type=vllm_api"]), remote_dir)
    assert remote == pytest.approx(local, abs=1e-5) and local[0] != 0.0


def test_frozen_remote_critic_is_reported(tmp_path, server, arith_model_dir, arithmetic_files):
    _, url = server
    out = str(tmp_path / "ppo")
    PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, algo="gae", steps=1,
                                              extra=["critic.type=vllm_api", f"critic.model.path={url}"]))).fit()
    record = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())
    assert record["critic/frozen"] == 1.0 and "critic/values/mean" in record


def test_server_down_mid_run_gives_clear_error(tmp_path, server, arith_model_dir, arithmetic_files):
    httpd, url = server
    out = str(tmp_path / "down")
    trainer = PPOTrainer(load_config(tiny_run_overrides(
        arith_model_dir, arithmetic_files, out, steps=1,
        extra=["reward_model.enable=true", "reward_model.type=vllm_api", f"reward_model.model.path={url}"])))
    httpd.shutdown()
    httpd.server_close()
    with pytest.raises(RemoteScoringError, match="127.0.0.1"):
        trainer.fit()
