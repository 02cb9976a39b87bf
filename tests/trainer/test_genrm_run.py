"""verl's generative reward model in a 2-step CPU run with FAPO's keys: the trainer serves the GenRM on loopback, an
`async def` reward function queries SGLang's /generate over aiohttp with the address and tokenizer it is given, and
the server is gone when the run ends."""

from __future__ import annotations

import http.client
import json
import os
import threading

import pytest

from hybridrl.config import load_config
from hybridrl.rewards.manager import RewardFunctionError
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import tiny_run_overrides

SERVER_THREADS = ("hybridrl-genrm", "hybridrl-serve")  # the GenRM server's loop, front and handler threads
GENRM_FUNCTION = '''
import aiohttp

GENRM_TOKENS = 3


async def compute_score_fapo(data_source, solution_str, ground_truth, extra_info, reward_router_address,
                             reward_model_tokenizer):
    prompt_ids = reward_model_tokenizer.apply_chat_template(
        [{"role": "user", "content": f"{ground_truth}={solution_str}"}], tokenize=True, return_dict=False,
        add_generation_prompt=True)
    payload = {"input_ids": prompt_ids,
               "sampling_params": {"max_new_tokens": GENRM_TOKENS, "temperature": 0, "ignore_eos": True}}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://{reward_router_address}/generate", json=payload) as response:
            assert response.status == 200, await response.text()
            output = await response.json()
    verdict = reward_model_tokenizer.decode(output["output_ids"], skip_special_tokens=True)
    return {"score": float(len(output["output_ids"]) == GENRM_TOKENS), "acc": True, "verdict": verdict}
'''
FAPO_KEYS = ["reward_model.enable=True", "reward_model.enable_resource_pool=True", "reward_model.n_gpus_per_node=8",
             "reward_model.nnodes=2", "reward_model.rollout.name=sglang",
             "reward_model.rollout.gpu_memory_utilization=0.95", "reward_model.rollout.tensor_model_parallel_size=1",
             "reward_model.rollout.free_cache_engine=False", "reward_model.reward_manager=dapo",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=False",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.len=2",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.log=True",
             "+reward_model.reward_kwargs.max_resp_len=4", "custom_reward_function.name=compute_score_fapo"]


@pytest.mark.parametrize("engine_keys", [[], ["reward_model.rollout.name=hybrid",
                                                 "reward_model.rollout.free_cache_engine=True"]], ids=["fapo", "hybrid"])
def test_two_steps_score_through_the_served_genrm(tmp_path, arith_model_dir, arithmetic_files, engine_keys):
    """FAPO's keys as written (sglang: the hf backend on the CPU), and the GPU path's engine (LLMEngine, its KV cache
    freed after each step's scoring and allocated again before the next) run on the CPU."""
    reward_file = tmp_path / "reward_fn_reasoning.py"
    reward_file.write_text(GENRM_FUNCTION)
    out_dir = str(tmp_path / "run")
    keys = FAPO_KEYS + engine_keys + [f"reward_model.model.path={arith_model_dir}",
                                      f"custom_reward_function.path={reward_file}"]
    before = {thread.ident for thread in threading.enumerate()}
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out_dir, extra=keys)))
    address = trainer.roles.reward.genrm.address
    assert type(trainer.roles.reward.genrm.backends[0]).__name__ == ("LLMEngine" if engine_keys else "HFRolloutBackend")
    trainer.fit()
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    assert len(steps) == 2
    for metrics in steps:
        assert metrics["critic/score/mean"] == 1.0  # every row got a GenRM answer of its 3 tokens
        assert metrics["reward_model/genrm/requests"] == 32.0  # 8 prompts x n=4, one request each
        assert metrics["reward_model/genrm/generated_tokens"] == 96.0
        assert metrics["reward_model/genrm/prompt_tokens"] > 32 and metrics["reward_model/genrm/errors"] == 0
        assert 0 < metrics["reward_model/genrm/serving_s"] <= metrics["reward_model/genrm/scoring_s"]
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.name.startswith(SERVER_THREADS)]
    assert left == []
    host, port = address.split(":")
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection(host, int(port), timeout=5).connect()


def test_a_failing_reward_function_stops_the_run_and_the_server(tmp_path, arith_model_dir, arithmetic_files):
    reward_file = tmp_path / "reward_fn_reasoning.py"
    reward_file.write_text(GENRM_FUNCTION.replace("return {", "raise RuntimeError('judge offline')\n    return {"))
    keys = [key for key in FAPO_KEYS if "free_cache_engine" not in key]  # verl's default: free it after scoring
    keys += [f"reward_model.model.path={arith_model_dir}", f"custom_reward_function.path={reward_file}"]
    before = {thread.ident for thread in threading.enumerate()}
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path / "run"),
                                                        extra=keys)))
    with pytest.raises(RewardFunctionError, match="raised RuntimeError: judge offline"):
        trainer.fit()
    assert [t.name for t in threading.enumerate() if t.ident not in before and t.name.startswith(SERVER_THREADS)] == []


def test_a_reward_function_that_does_not_load_leaves_no_server(tmp_path, arith_model_dir):
    from hybridrl.workers.reward import RewardWorker

    reward_file = tmp_path / "reward_fn_reasoning.py"
    reward_file.write_text(GENRM_FUNCTION)
    before = {thread.ident for thread in threading.enumerate()}
    cfg = load_config(FAPO_KEYS[:-1] + [f"reward_model.model.path={arith_model_dir}",
                                        f"custom_reward_function.path={reward_file}",
                                        "custom_reward_function.name=compute_score_missing", "trainer.device=cpu"])
    with pytest.raises(AttributeError, match="defines no function 'compute_score_missing'"):
        RewardWorker(cfg, tokenizer=None)
    assert [t.name for t in threading.enumerate() if t.ident not in before and t.name.startswith(SERVER_THREADS)] == []


@pytest.mark.gpu
def test_gpu_the_served_genrm_scores_two_steps_beside_the_hybrid_engine(tmp_path, arith_model_dir, arithmetic_files):
    """On a GPU: the GenRM's LLMEngine on the controller's device, its cache a share of the device beside the
    actor's rollout engine, freed after each step's scoring and allocated again."""
    from tests.trainer.helpers import gpu_run_overrides

    reward_file = tmp_path / "reward_fn_reasoning.py"
    reward_file.write_text(GENRM_FUNCTION)
    out_dir = str(tmp_path / "run")
    keys = FAPO_KEYS + [f"reward_model.model.path={arith_model_dir}", f"custom_reward_function.path={reward_file}",
                        "reward_model.rollout.name=hybrid", "reward_model.rollout.gpu_memory_utilization=0.05",
                        "reward_model.rollout.free_cache_engine=True", "trainer.device=cuda",
                        "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=auto",
                        "actor_rollout_ref.rollout.gpu_memory_utilization=0.05"]
    trainer = PPOTrainer(load_config(gpu_run_overrides(arith_model_dir, arithmetic_files, out_dir, extra=keys)))
    backend = trainer.roles.reward.genrm.backends[0]
    assert type(backend).__name__ == "LLMEngine" and backend.device.type == "cuda"
    trainer.fit()
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    assert [m["critic/score/mean"] for m in steps] == [1.0, 1.0]
    assert all(m["reward_model/genrm/errors"] == 0 for m in steps)
