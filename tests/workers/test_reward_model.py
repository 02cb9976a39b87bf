"""RewardModelWorker: in-process vs remote parity, score placement, chat-template switch, combine_scores."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.models.hf import load_tokenizer
from hybridrl.models.shm import CACHE_DIR, ROOT_ENV
from hybridrl.models.tiny import DEFAULT_CHARS, build_char_tokenizer
from hybridrl.serving.scorer import pad_right
from hybridrl.serving.server import TOKEN_ENV, serve
from hybridrl.workers.reward_model import RewardModelWorker, combine_scores
from tests.serving.helpers import LOOPBACK, running, save_value_model_dir, verl_batch

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12], [13]]
RESPONSES = [[20, 21, 22, 23], [24], [25, 26]]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> str:
    return save_value_model_dir(str(tmp_path_factory.mktemp("rm")), seed=3)


@pytest.fixture
def rm_url(rm_dir, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with running(serve(rm_dir, LOOPBACK, 0, "reward", max_batch=2)) as url:
        yield url


def test_remote_scores_equal_in_process_and_sit_on_last_response_token(rm_dir, rm_url):
    batch = verl_batch(PROMPTS, RESPONSES)
    tokenizer = load_tokenizer(rm_dir)
    local = RewardModelWorker(rm_dir, tokenizer=tokenizer, micro_batch_size=2).compute_rm_score(batch)["rm_scores"]
    remote_worker = RewardModelWorker(rm_url, tokenizer=tokenizer, remote=True, client_kwargs={"batch_size": 2})
    remote = remote_worker.compute_rm_score(batch)["rm_scores"]
    assert remote.shape == local.shape == (3, 4) and torch.allclose(remote, local, atol=1e-5)
    last = [len(r) - 1 for r in RESPONSES]
    off_last = torch.ones_like(local, dtype=torch.bool)
    off_last[torch.arange(3), last] = False
    assert (local[off_last] == 0).all() and (local[torch.arange(3), last] != 0).all()
    assert remote_worker.describe() == f"reward model: remote at {rm_url}"


def test_chat_template_switch_rerenders_with_the_rm_tokenizer(rm_dir, rm_url):
    rm_tokenizer = load_tokenizer(rm_dir)
    actor_tokenizer = build_char_tokenizer(DEFAULT_CHARS[::-1])  # other ids for the same characters
    raw_prompts = [[{"role": "user", "content": "1+2="}], [{"role": "user", "content": "7*6="}]]
    prompts = [actor_tokenizer(actor_tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False),
                               add_special_tokens=False)["input_ids"] for chat in raw_prompts]
    responses = [actor_tokenizer("3")["input_ids"] + [actor_tokenizer.eos_token_id], actor_tokenizer("42")["input_ids"]]
    batch = verl_batch(prompts, responses)
    batch["raw_prompt"] = raw_prompts
    worker = RewardModelWorker(rm_dir, tokenizer=rm_tokenizer, input_tokenizer=actor_tokenizer)
    assert worker.switch_template
    got = worker.compute_rm_score(batch)["rm_scores"]
    # Expected: the RM scores its own rendering of chat + assistant answer (EOS text stripped, as verl does).
    texts = [rm_tokenizer.apply_chat_template(chat + [{"role": "assistant", "content": answer}], tokenize=False)
             for chat, answer in zip(raw_prompts, ["3", "42"])]
    rows = [rm_tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    plain = RewardModelWorker(rm_dir, tokenizer=rm_tokenizer)
    want = plain._local_scores(*pad_right(rows, 0))
    assert torch.allclose(got[torch.arange(2), [1, 1]], want, atol=1e-5)
    remote = RewardModelWorker(rm_url, tokenizer=rm_tokenizer, input_tokenizer=actor_tokenizer, remote=True)
    assert torch.allclose(remote.compute_rm_score(batch)["rm_scores"], got, atol=1e-5)


def test_same_tokenizer_means_no_switch(rm_dir):
    tokenizer = load_tokenizer(rm_dir)
    assert not RewardModelWorker(rm_dir, tokenizer=tokenizer, input_tokenizer=build_char_tokenizer()).switch_template


def test_max_length_is_enforced_not_truncated(rm_dir):
    rm_tokenizer = load_tokenizer(rm_dir)
    actor_tokenizer = build_char_tokenizer(DEFAULT_CHARS[::-1])
    batch = verl_batch([actor_tokenizer("12345")["input_ids"]], [actor_tokenizer("678")["input_ids"]])
    worker = RewardModelWorker(rm_dir, tokenizer=rm_tokenizer, input_tokenizer=actor_tokenizer, max_length=4)
    with pytest.raises(ValueError, match="reward_model.max_length=4"):
        worker.compute_rm_score(batch)


def test_combine_scores_prefers_rm_scores_like_verl_naive_manager():
    rule, rm = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 0.3]])
    assert combine_scores(rule, rm) is rm
    assert combine_scores(rule, None) is rule
    with pytest.raises(ValueError, match="no reward"):
        combine_scores(None, None)


def test_client_kwargs_only_for_remote(rm_dir):
    with pytest.raises(ValueError, match="remote=True"):
        RewardModelWorker(rm_dir, tokenizer=load_tokenizer(rm_dir), client_kwargs={"timeout_s": 1.0})


def test_use_shm_loads_a_local_reward_model_from_its_copy_and_refuses_a_remote_one(rm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(tmp_path))
    worker = RewardModelWorker(rm_dir, tokenizer=load_tokenizer(rm_dir), use_shm=True)
    assert worker.replicas[0].config._name_or_path.startswith(str(tmp_path / CACHE_DIR))
    with pytest.raises(ValueError, match="reward_model.model.use_shm=false"):
        RewardModelWorker("http://127.0.0.1:9/", tokenizer=load_tokenizer(rm_dir), remote=True, use_shm=True)


def test_replicas_on_several_devices_score_their_micro_batches_in_the_batchs_order(rm_dir):
    """reward_model.device_ids with several devices: one replica each, micro-batches dealt in turn (here two
    CPU replicas: the same split and ordering as two GPUs)."""
    batch = verl_batch(PROMPTS * 3, RESPONSES * 3)
    tokenizer = load_tokenizer(rm_dir)
    one = RewardModelWorker(rm_dir, tokenizer=tokenizer, micro_batch_size=2)
    two = RewardModelWorker(rm_dir, tokenizer=tokenizer, micro_batch_size=2, devices=["cpu", "cpu"])
    assert len(two.replicas) == 2 and two.replicas[0] is not two.replicas[1]
    # the same rows in the same micro-batches: equal up to CPU kernels' thread-dependent summation order
    torch.testing.assert_close(two.compute_rm_score(batch)["rm_scores"], one.compute_rm_score(batch)["rm_scores"],
                               rtol=1e-5, atol=1e-6)


def test_the_reward_model_runs_on_its_listed_gpus_else_on_the_controllers():
    from hybridrl.workers.reward import reward_model_devices

    cuda = torch.device("cuda")
    assert reward_model_devices(load_config([]), cuda) == [torch.device("cuda", 0)]
    assert reward_model_devices(load_config(["reward_model.device_ids=[2,3]"]), cuda) == [
        torch.device("cuda", 2), torch.device("cuda", 3)]
    assert reward_model_devices(load_config(["reward_model.device_ids=[2]"]), torch.device("cpu")) == [
        torch.device("cpu")]


def test_the_trainer_loads_the_reward_model_in_its_compute_dtype(rm_dir):
    """Frozen, so no fp32 master copy: fp32 on CPU by default, the fsdp_config's param_dtype when set."""
    from hybridrl.workers.reward import build_reward_model

    keys = ["reward_model.enable=true", f"reward_model.model.path={rm_dir}"]
    tokenizer = load_tokenizer(rm_dir)
    default = build_reward_model(load_config(keys), tokenizer, torch.device("cpu"))
    assert next(default.replicas[0].parameters()).dtype == torch.float32 and "(float32)" in default.describe()
    bf16 = build_reward_model(load_config(keys + ["+reward_model.model.fsdp_config.mixed_precision.param_dtype=bf16"]),
                              tokenizer, torch.device("cpu"))
    assert next(bf16.replicas[0].parameters()).dtype == torch.bfloat16


@pytest.mark.gpu
def test_a_reward_model_on_a_gpu_runs_in_bf16_and_scores_like_the_cpu_one(rm_dir):
    """The trainer's GPU default: the controller's GPU, bf16 weights (as verl loads its reward model)."""
    from hybridrl.workers.reward import build_reward_model

    batch = verl_batch(PROMPTS, RESPONSES)
    tokenizer = load_tokenizer(rm_dir)
    gpu = build_reward_model(load_config(["reward_model.enable=true", f"reward_model.model.path={rm_dir}"]),
                             tokenizer, torch.device("cuda"))
    weights = next(gpu.replicas[0].parameters())
    assert weights.device == torch.device("cuda", 0) and weights.dtype == torch.bfloat16
    assert "on cuda:0 (bfloat16)" in gpu.describe()
    cpu = RewardModelWorker(rm_dir, tokenizer=tokenizer)
    torch.testing.assert_close(gpu.compute_rm_score(batch)["rm_scores"], cpu.compute_rm_score(batch)["rm_scores"],
                               atol=2e-2, rtol=5e-2)


def test_a_token_budget_sets_the_rows_per_forward_and_scores_the_same(rm_dir):
    """reward_model.use_dynamic_bsz: forward_max_token_len_per_gpu tokens of the padded width per forward."""
    from hybridrl.workers.reward import build_reward_model

    batch = verl_batch(PROMPTS * 4, RESPONSES * 4)  # 12 rows, padded width 9
    tokenizer = load_tokenizer(rm_dir)
    keys = ["reward_model.enable=true", f"reward_model.model.path={rm_dir}", "reward_model.use_dynamic_bsz=true",
            "reward_model.forward_max_token_len_per_gpu=40"]
    budget = build_reward_model(load_config(keys), tokenizer)
    width = batch["input_ids"].shape[1]
    assert width == 9 and budget.rows_per_forward(9) == 4 and budget.rows_per_forward(10_000) == 1
    fixed = RewardModelWorker(rm_dir, tokenizer=tokenizer, micro_batch_size=2)
    torch.testing.assert_close(budget.compute_rm_score(batch)["rm_scores"], fixed.compute_rm_score(batch)["rm_scores"],
                               rtol=1e-5, atol=1e-6)
