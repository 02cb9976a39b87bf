"""The tool agent loop on a scripted engine: exact ids, mask, log-probs and turn counts, the token budget,
and the append-only token stream the engine sees."""

from __future__ import annotations

import pytest
import torch

from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, fake_log_prob, rollout_config, tool_call

CALCULATOR = "hybridrl.rollout.tools.builtin.calculator"
MESSAGES = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "What is 2+3?"}]
PROMPT_TEXT = ("<|im_start|>system\nUse tools.\n# Tools\ncalculator(expression)\n<|im_end|>\n"
               "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
TURN0 = tool_call("calculator", expression="2+3") + "<|im_end|>"
OBSERVATION = "<|im_start|>user\n<tool_response>5</tool_response><|im_end|>\n"
GENERATION_PROMPT = "<|im_start|>assistant\n"
TURN1 = "The answer is 5.<|im_end|>"


def calculator_then_answer(text: str, turn: int) -> str:
    return TURN0 if turn == 0 else TURN1


def run(tokenizer, respond, rows=1, config=None, **kwargs):
    engine = ScriptedEngine(tokenizer, respond, **kwargs)
    config = config or rollout_config(function_tool_path=CALCULATOR, default_agent_loop="tool_agent")
    manager = AgentLoopManager(engine, tokenizer, config, model_type="qwen2")
    prompts = Batch(non_tensors={"raw_prompt": [MESSAGES] * rows, "data_source": ["toy"] * rows,
                                 "extra_info": [{"index": i} for i in range(rows)]})
    try:
        return manager.generate_sequences(prompts), engine
    finally:
        manager.close()


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def response_of(batch: Batch, row: int = 0) -> tuple[list[int], list[int], list[float]]:
    prompt_width = batch["prompts"].shape[1]
    length = int(batch["attention_mask"][row, prompt_width:].sum())
    return (batch["responses"][row, :length].tolist(), batch["response_mask"][row, :length].tolist(),
            batch["rollout_log_probs"][row, :length].tolist())


def test_trajectory_gives_exact_ids_mask_logprobs_and_turns(chatml_tokenizer):
    batch, engine = run(chatml_tokenizer, calculator_then_answer)
    enc = lambda text: encode(chatml_tokenizer, text)  # noqa: E731
    turn0, glue, observation, generation_prompt, turn1 = (enc(TURN0), enc("\n"), enc(OBSERVATION),
                                                           enc(GENERATION_PROMPT), enc(TURN1))
    ids, mask, log_probs = response_of(batch)
    assert ids == turn0 + glue + observation + generation_prompt + turn1
    inserted = len(glue) + len(observation) + len(generation_prompt)
    assert mask == [1] * len(turn0) + [0] * inserted + [1] * len(turn1)
    expected_lp = ([fake_log_prob(i) for i in range(len(turn0))] + [0.0] * inserted
                   + [fake_log_prob(i) for i in range(len(turn1))])
    assert log_probs == pytest.approx(expected_lp)
    prompt = batch["prompts"][0][batch["attention_mask"][0, : batch["prompts"].shape[1]].bool()].tolist()
    assert prompt == enc(PROMPT_TEXT)
    assert list(batch["__num_turns__"]) == [4]  # user prompt + 2 assistant turns + 1 tool turn (verl's count)
    assert len(engine.requests) == 2


def test_final_ids_equal_the_rendered_conversation_up_to_the_last_glue(chatml_tokenizer):
    batch, _ = run(chatml_tokenizer, calculator_then_answer)
    conversation = MESSAGES + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "The answer is 5."}]
    from tests.rollout.agent.helpers import CALC_SCHEMA

    rendered = chatml_tokenizer.apply_chat_template(conversation, tools=[CALC_SCHEMA], tokenize=False)
    full = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    # The template closes the last turn with "\n"; a trajectory ends on the model's `<|im_end|>` (no glue after it).
    assert full == encode(chatml_tokenizer, rendered)[:-1]
    assert chatml_tokenizer.decode(encode(chatml_tokenizer, rendered)[-1:]) == "\n"


def test_trained_tokens_never_contain_a_tool_response(chatml_tokenizer):
    def two_calls_per_turn(text: str, turn: int) -> str:
        if turn < 2:
            return tool_call("calculator", expression=f"{turn}*7") + tool_call("calculator", expression="1+1") + "<|im_end|>"
        return "done<|im_end|>"

    config = rollout_config(response_length=640, function_tool_path=CALCULATOR, default_agent_loop="tool_agent",
                            max_parallel_calls=2)
    batch, _ = run(chatml_tokenizer, two_calls_per_turn, rows=3, config=config)
    for row in range(3):
        ids, mask, log_probs = response_of(batch, row)
        trained = chatml_tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
        everything = chatml_tokenizer.decode(ids, skip_special_tokens=False)
        assert everything.count("<tool_response>") == 4 and "<tool_response>" not in trained
        assert "</tool_response>" not in trained
        assert all(lp == 0.0 for lp, m in zip(log_probs, mask) if not m)
        assert all(lp != 0.0 for lp, m in zip(log_probs, mask) if m)
    assert list(batch["__num_turns__"]) == [6, 6, 6]


def test_engine_sees_an_append_only_stream_and_the_remaining_budget(chatml_tokenizer):
    batch, engine = run(chatml_tokenizer, calculator_then_answer)
    first, second = engine.requests
    ids, _, _ = response_of(batch)
    prompt = encode(chatml_tokenizer, PROMPT_TEXT)
    turn1 = encode(chatml_tokenizer, TURN1)
    assert first.prompt_ids == prompt and second.prompt_ids == prompt + ids[: len(ids) - len(turn1)]
    assert first.params.max_new_tokens == 256
    assert second.params.max_new_tokens == 256 - (len(ids) - len(turn1))
    im_end = chatml_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in first.params.stop_token_ids and first.params.n == 1


def test_response_length_is_the_whole_trajectory_budget(chatml_tokenizer):
    enc = lambda text: encode(chatml_tokenizer, text)  # noqa: E731
    before_turn1 = len(enc(TURN0)) + 1 + len(enc(OBSERVATION)) + len(enc(GENERATION_PROMPT))
    budget = before_turn1 + 5  # the answer turn is cut after 5 tokens
    config = rollout_config(response_length=budget, function_tool_path=CALCULATOR, default_agent_loop="tool_agent")
    batch, engine = run(chatml_tokenizer, calculator_then_answer, config=config)
    ids, mask, _ = response_of(batch)
    assert len(ids) == budget and ids[before_turn1:] == enc(TURN1)[:5] and mask[before_turn1:] == [1] * 5
    assert engine.requests[1].params.max_new_tokens == 5
    assert batch["responses"].shape == (1, budget)


def test_a_tool_turn_that_would_reach_the_budget_is_dropped(chatml_tokenizer):
    enc = lambda text: encode(chatml_tokenizer, text)  # noqa: E731
    budget = len(enc(TURN0)) + 1 + len(enc(OBSERVATION)) + len(enc(GENERATION_PROMPT))  # no room to answer
    config = rollout_config(response_length=budget, function_tool_path=CALCULATOR, default_agent_loop="tool_agent")
    batch, engine = run(chatml_tokenizer, calculator_then_answer, config=config)
    ids, mask, _ = response_of(batch)
    assert ids == enc(TURN0) and mask == [1] * len(ids)  # ends on the model's own tokens
    assert list(batch["__num_turns__"]) == [2] and len(engine.requests) == 1
    assert batch.meta["metrics"]["agent_loop/num_tool_turns_dropped"] == 1.0
    # The last valid response token is the model's `<|im_end|>`: where a reward lands.
    assert ids[-1] == chatml_tokenizer.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.parametrize(("side", "shown"), [("left", "(truncated)...1234567890"),
                                             ("right", "1234567890...(truncated)"),
                                             ("middle", "12345...(truncated)...67890")])
def test_max_tool_response_length_cuts_characters(chatml_tokenizer, side, shown):
    # The calculator answers "12345678901234567890" (20 characters); 10 are kept.
    respond = lambda text, turn: (tool_call("calculator", expression="12345678901234567890*1") + "<|im_end|>"
                                  if turn == 0 else "ok<|im_end|>")  # noqa: E731
    config = rollout_config(function_tool_path=CALCULATOR, default_agent_loop="tool_agent",
                            max_tool_response_length=10, tool_response_truncate_side=side)
    batch, _ = run(chatml_tokenizer, respond, config=config)
    text = chatml_tokenizer.decode(response_of(batch)[0], skip_special_tokens=False)
    assert f"<tool_response>{shown}</tool_response>" in text
    assert batch.meta["metrics"]["agent_loop/num_tool_responses_truncated"] == 1.0


@pytest.mark.parametrize(("key", "value", "turns", "num_turns"), [("max_assistant_turns", 2, 2, 4),
                                                                  ("max_user_turns", 1, 2, 4)])
def test_turn_limits(chatml_tokenizer, key, value, turns, num_turns):
    always_call = lambda text, turn: tool_call("calculator", expression=f"{turn}+1") + "<|im_end|>"  # noqa: E731
    config = rollout_config(function_tool_path=CALCULATOR, default_agent_loop="tool_agent", **{key: value})
    batch, engine = run(chatml_tokenizer, always_call, config=config)
    assert len(engine.requests) == turns and list(batch["__num_turns__"]) == [num_turns]
    assert response_of(batch)[1][-1] == 1  # ended on a model turn


def test_a_turn_without_a_tool_call_ends_the_trajectory(chatml_tokenizer):
    batch, engine = run(chatml_tokenizer, lambda text, turn: "It is 5.<|im_end|>")
    assert len(engine.requests) == 1 and list(batch["__num_turns__"]) == [2]
    assert response_of(batch)[0] == encode(chatml_tokenizer, "It is 5.<|im_end|>")


def test_position_ids_and_padding(chatml_tokenizer):
    batch, _ = run(chatml_tokenizer, calculator_then_answer)
    attention = batch["attention_mask"][0]
    assert torch.equal(batch["position_ids"][0], (attention.cumsum(0) - 1).clamp(min=0))
    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], dim=1))
    pad = chatml_tokenizer.pad_token_id
    assert (batch["input_ids"][0][~attention.bool()] == pad).all()
