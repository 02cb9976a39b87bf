"""The tool quickstart (`hybridrl quickstart --task tool`): its warm-start traces are exactly the token streams the
agent loop builds for the same turns, its reward reads the final answer, and (slow) it learns."""

from __future__ import annotations

import json
import os


from hybridrl.models.tiny import build_char_tokenizer
from hybridrl.quickstart_tool import CALCULATOR, compute_score, make_rows, trace_tokens
from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.rollout.agent.chat_tokens import ChatRenderer
from hybridrl.rollout.tools.builtin.calculator import calculator
from hybridrl.rollout.tools.function_tool import load_function_tools
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config


def test_warm_start_traces_are_the_agent_loops_token_streams():
    tokenizer = build_char_tokenizer(chat_format="chatml")
    rows = make_rows(3, seed=0, split="train")
    expressions = {row["prompt"][0]["content"]: row["prompt"][0]["content"].rstrip("=") for row in rows}

    def respond(text: str, turn: int) -> str:  # what a model that learned the traces writes
        expression = next(e for question, e in expressions.items() if question in text)
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
    renderer = ChatRenderer(tokenizer, model_type="qwen2")
    tools = [tool.tool_schema.to_dict() for tool in load_function_tools(CALCULATOR)]
    width = batch["prompts"].shape[1]
    for index, row in enumerate(rows):
        ids, trained = trace_tokens(renderer, tools, row)
        valid = batch["attention_mask"][index].bool()
        assert batch["input_ids"][index][valid].tolist() == ids
        response_mask = batch["response_mask"][index][: int(valid[width:].sum())].tolist()
        assert trained == [0] * (len(ids) - len(response_mask)) + response_mask
    assert list(batch["__num_turns__"]) == [4, 4, 4]


def test_reward_is_exact_match_of_the_last_line_and_counts_tool_calls():
    info = {"tool_rewards": [0.0]}
    assert compute_score("arithmetic/calculator", "<tool_call>..</tool_call>\n<tool_response>391</tool_response>\n391",
                         "391", info) == {"score": 1.0, "tool_calls": 1.0}
    assert compute_score("arithmetic/calculator", "390", "391", None) == {"score": 0.0, "tool_calls": 0.0}


def test_the_task_option_picks_the_quickstart(capsys):
    from hybridrl.cli import main

    assert main(["quickstart", "--task", "tool", "--help"]) == 0
    assert "hybridrl quickstart --task tool" in capsys.readouterr().out
    assert main(["quickstart", "--task", "chess"]) == 2
    assert "invalid choice: 'chess'" in capsys.readouterr().err


def test_rows_are_distinct_five_digit_products():
    rows = make_rows(50, seed=1, split="test")
    assert len({row["prompt"][0]["content"] for row in rows}) == 50
    assert all(10000 <= int(row["reward_model"]["ground_truth"]) < 100000 for row in rows)


def test_the_tool_quickstart_runs_to_its_checkpoint(tmp_path):
    """The whole pipeline at toy sizes: task files, warm start, one GRPO step with multi-turn rollouts through the
    trainer, validation before and after, and the checkpoint the result names."""
    from hybridrl.quickstart_tool import run

    result = run(str(tmp_path), steps=1, num_train=32, num_test=4, test_freq=1, sft_steps=2, batch_size=8, n=8,
                 plot=False)
    assert [step for step, _, _ in result["curve"]] == [0, 1]
    assert 0.0 <= result["val_accuracy_after"] <= 1.0 and result["val_tool_calls_after"] >= 0.0
    assert os.path.isdir(result["checkpoint"]) and result["checkpoint"].endswith("global_step_1")
