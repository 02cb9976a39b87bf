"""The tool quickstart's warm start: its traces are exactly the token streams the agent loop builds for the same
turns, its short pieces cut those traces where the docstring says, its batches hold the stated mix, its loss
counts only trained tokens, and a short run saves a loadable model."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hybridrl.models.tiny import build_char_tokenizer, save_tiny_model_dir
from hybridrl.quickstart_tool import MODEL_SHAPE, make_rows
from hybridrl.quickstart_tool_sft import (CALCULATOR, Trace, WarmStartMix, after_the_call_decision, answer_turn,
                                          call_decision, call_turn, collate, sample_exact_probability,
                                          trained_log_probs, warm_start, warm_start_data, worked_trace)
from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.rollout.agent.chat_tokens import ChatRenderer
from hybridrl.rollout.tools.builtin.calculator import calculator
from hybridrl.rollout.tools.function_tool import load_function_tools
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config

ROW = {"prompt": [{"role": "user", "content": "694*87="}], "reward_model": {"ground_truth": "60378"}}


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer(chat_format="chatml")


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatRenderer(tokenizer, model_type="qwen2")


def calculator_schemas() -> list[dict]:
    return [tool.tool_schema.to_dict() for tool in load_function_tools(CALCULATOR)]


def text(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


def trained_text(tokenizer, trace: Trace) -> str:
    return text(tokenizer, [token for token, trained in zip(trace.ids, trace.trained) if trained])


def test_worked_traces_are_the_agent_loops_token_streams(tokenizer, renderer):
    rows = make_rows(3, seed=0, split="train")
    expressions = {row["prompt"][0]["content"]: row["prompt"][0]["content"].rstrip("=") for row in rows}

    def respond(prompt_text: str, turn: int) -> str:  # what a model that learned the traces writes
        expression = next(e for question, e in expressions.items() if question in prompt_text)
        if turn == 0:
            call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
            return f"<tool_call>{call}</tool_call><|im_end|>"
        return calculator(expression) + "<|im_end|>"

    config = rollout_config(prompt_length=1024, response_length=256, function_tool_path=CALCULATOR)
    manager = AgentLoopManager(ScriptedEngine(tokenizer, respond), tokenizer, config, model_type="qwen2")
    prompts = Batch(non_tensors={"raw_prompt": [row["prompt"] for row in rows], "agent_name": ["tool_agent"] * 3})
    try:
        batch = manager.generate_sequences(prompts)
    finally:
        manager.close()
    width = batch["prompts"].shape[1]
    for index, row in enumerate(rows):
        trace = worked_trace(renderer, calculator_schemas(), row)
        valid = batch["attention_mask"][index].bool()
        assert batch["input_ids"][index][valid].tolist() == trace.ids
        response_mask = batch["response_mask"][index][: int(valid[width:].sum())].tolist()
        assert trace.trained == [0] * (len(trace.ids) - len(response_mask)) + response_mask
    assert list(batch["__num_turns__"]) == [4, 4, 4]


def test_the_pieces_of_a_trace(tokenizer, renderer):
    data = warm_start_data(renderer, [ROW])
    trace = data.traces[0]
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "694*87"}}</tool_call><|im_end|>'
    assert trained_text(tokenizer, trace) == call + "60378<|im_end|>"

    tail = answer_turn(trace)
    assert text(tokenizer, tail.ids) == ("\n<|im_start|>user\n<tool_response>60378</tool_response><|im_end|>\n"
                                         "<|im_start|>assistant\n60378<|im_end|>")
    assert trained_text(tokenizer, tail) == "60378<|im_end|>"

    system = text(tokenizer, trace.ids[: data.system_length])
    assert system == "<|im_start|>system\n# Tools\ncalculator(expression)\n<|im_end|>\n"
    question_on = call_turn(trace, data.system_length)  # the longest crop keeps the whole question
    assert text(tokenizer, question_on.ids) == "<|im_start|>user\n694*87=<|im_end|>\n<|im_start|>assistant\n" + call
    assert trained_text(tokenizer, question_on) == call

    assert trained_text(tokenizer, call_decision(trace)) == "<tool_call>"
    assert call_decision(trace).ids == trace.ids[: trace.first_trained + 1]
    after_decision = call.removeprefix("<tool_call>") + "60378<|im_end|>"
    assert trained_text(tokenizer, after_the_call_decision(trace)) == after_decision

    direct = data.direct[0]
    assert text(tokenizer, direct.ids).endswith("694*87=<|im_end|>\n<|im_start|>assistant\n6")
    assert trained_text(tokenizer, direct) == "6" and sum(direct.trained) == 1


def test_batches_hold_the_mix_and_call_turns_keep_the_question(tokenizer, renderer):
    data = warm_start_data(renderer, make_rows(20, seed=0, split="train"))
    mix = WarmStartMix(batch_size=16, answer_turns=4, call_turns=5, direct_answers=2)
    first = next(data.batches(mix, seed=3))
    assert first == next(data.batches(mix, seed=3))  # seeded
    assert len(first) == 16 and mix.whole_traces == 5
    whole, answers, calls, direct = first[:5], first[5:9], first[9:14], first[14:]
    assert all(example in data.traces for example in whole)
    assert all(example in data.answer_turns for example in answers)
    assert all(example in data.direct for example in direct)
    for call in calls:
        decoded = text(tokenizer, call.ids)
        assert decoded.endswith("</tool_call><|im_end|>") and "<|im_start|>user\n" in decoded
        assert len(call.ids) in range(len(data.traces[0].ids) - len(data.answer_turns[0].ids) - data.system_length,
                                      len(data.traces[0].ids) - len(data.answer_turns[0].ids) + 1)


def test_collate_pads_right_and_labels_only_trained_tokens():
    batch = collate([Trace([5, 6, 7], [0, 1, 1]), Trace([8], [1])], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]


def test_the_exact_sampling_probability_is_the_product_of_the_trained_tokens_probabilities(tmp_path, tokenizer):
    from hybridrl.models.hf import load_causal_lm

    model = load_causal_lm(save_tiny_model_dir(str(tmp_path / "model"), chat_format="chatml", **MODEL_SHAPE))
    example = Trace([10, 11, 12, 13], [0, 0, 1, 1])
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([example.ids])).logits[0].float(), dim=-1)
    by_hand = float(probs[1, 12] * probs[2, 13])
    assert sample_exact_probability(model, [example], pad_id=0) == pytest.approx(by_hand, rel=1e-5)
    with torch.no_grad():
        log_prob_sums, counts = trained_log_probs(model, [example, Trace([10, 11], [0, 1])], pad_id=0)
    assert counts.tolist() == [2, 1] and math.exp(float(log_prob_sums[0])) == pytest.approx(by_hand, rel=1e-5)


def test_a_short_warm_start_saves_a_model_and_reports_what_it_measured(tmp_path):
    from hybridrl.models.hf import load_causal_lm

    base = save_tiny_model_dir(str(tmp_path / "base"), chat_format="chatml", **MODEL_SHAPE)
    rows = make_rows(40, seed=0, split="train")
    report = warm_start(base, rows, str(tmp_path / "sft"), max_steps=10, cooldown_steps=2, num_held_out=8,
                        mix=WarmStartMix(batch_size=8, answer_turns=2, call_turns=2, direct_answers=1))
    assert report["steps"] == 12
    assert all(0.0 <= report[key] <= 1.0 for key in ("copy_exact", "copy_exact_at_stop", "call_probability"))
    assert report["loss"] < 4.0  # from ~ln(vocab) = 4.7 at the start
    assert load_causal_lm(str(tmp_path / "sft")).config.num_attention_heads == MODEL_SHAPE["num_heads"]
