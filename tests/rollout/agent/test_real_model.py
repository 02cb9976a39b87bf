"""End to end on a real (tiny, random) model: what the engine saw is what the batch trains on, and the
single-turn agent loop generates what the batch rollout path generates."""

from __future__ import annotations

import pytest
import torch

from hybridrl.models.tiny import build_tiny_model
from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf_backend import HFRolloutBackend
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import rollout_config, tool_call
from tests.rollout.agent.hf_request_engine import HFRequestEngine, ScriptedFirstTurn, teacher_forced_log_probs

MESSAGES = [{"role": "user", "content": "What is 17*23?"}]


@pytest.fixture(scope="module")
def model(chatml_tokenizer):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: thread sync would cost more than it saves on a shared CPU
    yield build_tiny_model("qwen2", seed=3, vocab_size=len(chatml_tokenizer)).eval()
    torch.set_num_threads(threads)


def prompts(rows: int = 1) -> Batch:
    return Batch(non_tensors={"raw_prompt": [MESSAGES] * rows, "extra_info": [{}] * rows})


def test_rollout_log_probs_of_trained_tokens_match_a_forward_over_the_final_row(chatml_tokenizer, model):
    """Turn 1 is generated after the observation tokens: its log-probs equal those of one teacher-forced
    forward over the final row only if the engine was conditioned on exactly the row the trainer will see."""
    engine = ScriptedFirstTurn(HFRequestEngine(model, chatml_tokenizer.pad_token_id), chatml_tokenizer,
                               tool_call("calculator", expression="17*23") + "<|im_end|>")
    config = rollout_config(prompt_length=96, response_length=120, default_agent_loop="tool_agent",
                            function_tool_path="hybridrl.rollout.tools.builtin.calculator")
    manager = AgentLoopManager(engine, chatml_tokenizer, config, model_type="qwen2")
    batch = manager.generate_sequences(prompts(), SamplingParams(do_sample=False))
    manager.close()
    row = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    prompt_len = int(batch["attention_mask"][0, :96].sum())
    mask = batch["response_mask"][0, : len(row) - prompt_len]
    expected = teacher_forced_log_probs(model, row[:prompt_len], row[prompt_len:])
    rollout = batch["rollout_log_probs"][0, : len(row) - prompt_len]
    assert "<tool_response>391</tool_response>" in chatml_tokenizer.decode(row, skip_special_tokens=False)
    assert int(mask.sum()) > len(chatml_tokenizer(tool_call("calculator", expression="17*23"))["input_ids"])  # turn 1 ran
    assert torch.allclose(rollout[mask.bool()], torch.tensor(expected)[mask.bool()], atol=1e-4)
    assert rollout[~mask.bool()].eq(0).all()


def test_single_turn_agent_generates_what_the_batch_path_generates(chatml_tokenizer, model):
    engine = HFRequestEngine(model, chatml_tokenizer.pad_token_id)
    manager = AgentLoopManager(engine, chatml_tokenizer, rollout_config(prompt_length=64, response_length=24))
    batch = manager.generate_sequences(prompts(), SamplingParams(do_sample=False))
    manager.close()
    prompt = chatml_tokenizer(chatml_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False),
                              add_special_tokens=False)["input_ids"]
    reference = HFRolloutBackend(model, pad_token_id=chatml_tokenizer.pad_token_id).generate(
        [prompt], SamplingParams(do_sample=False, max_new_tokens=24))
    length = int(batch["attention_mask"][0, 64:].sum())
    assert batch["responses"][0, :length].tolist() == reference.token_ids[0]
    assert batch["rollout_log_probs"][0, :length].tolist() == pytest.approx(reference.log_probs[0], abs=1e-5)


def test_a_simulated_users_reply_is_conditioned_on_and_never_trained_on(chatml_tokenizer, model, tmp_path):
    """Turn 0 answers wrongly (scripted); verl's GSM8K interaction replies; turn 1 is the model's own. Its
    log-probs equal a teacher-forced forward over the final row, and the user's tokens are mask 0, log-prob 0."""
    from hybridrl.rollout.interactions.gsm8k import INCORRECT

    path = tmp_path / "interaction.yaml"
    path.write_text("interaction:\n  - {name: gsm8k, class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction}\n")
    engine = ScriptedFirstTurn(HFRequestEngine(model, chatml_tokenizer.pad_token_id), chatml_tokenizer,
                               "#### 17<|im_end|>")
    config = rollout_config(prompt_length=96, response_length=120, default_agent_loop="tool_agent",
                            interaction_config_path=str(path))
    manager = AgentLoopManager(engine, chatml_tokenizer, config, model_type="qwen2")
    rows = Batch(non_tensors={"raw_prompt": [MESSAGES], "extra_info": [{"interaction_kwargs": {
        "name": "gsm8k", "ground_truth": "391"}}]})
    batch = manager.generate_sequences(rows, SamplingParams(do_sample=False))
    manager.close()
    row = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    prompt_len = int(batch["attention_mask"][0, :96].sum())
    response = row[prompt_len:]
    mask = batch["response_mask"][0, : len(response)].bool()
    rollout = batch["rollout_log_probs"][0, : len(response)]
    user = chatml_tokenizer(f"<|im_start|>user\n{INCORRECT}<|im_end|>\n", add_special_tokens=False)["input_ids"]
    start = next(i for i in range(len(response)) if response[i:i + len(user)] == user)
    assert not mask[start:start + len(user)].any() and rollout[start:start + len(user)].eq(0).all()
    assert int(mask[start + len(user):].sum()) > 0  # turn 1 ran after the reply
    expected = torch.tensor(teacher_forced_log_probs(model, row[:prompt_len], response))
    assert torch.allclose(rollout[mask], expected[mask], atol=1e-4)
    assert rollout[~mask].eq(0).all()
