"""Built-in tools: the calculator (safe evaluation) and verl's GSM8K answer check with its per-trajectory penalty."""

from __future__ import annotations

import asyncio

import pytest

from hybridrl.rollout.tools import ToolCall, ToolSession, ToolSettings, load_all_tools
from hybridrl.rollout.tools.builtin.calculator import calculator, evaluate
from hybridrl.rollout.tools.builtin.gsm8k import Gsm8kTool
from hybridrl.rollout.tools.executors import ToolExecutors


@pytest.mark.parametrize(("expression", "result"), [
    ("1234*5678", "7006652"), ("(3+4)*5", "35"), ("7/2", "3.5"), ("6/3", "2"), ("7//2", "3"), ("-7%3", "2"),
    ("2**10", "1024"), ("-(2.5)", "-2.5"), ("1/3", "0.3333333333"), (" 12 - 20 ", "-8"),
    ("123456789012345678901234567890*10", "1234567890123456789012345678900"),  # integers stay exact
])
def test_calculator_values(expression, result):
    assert calculator(expression) == result


@pytest.mark.parametrize(("expression", "message"), [
    ("__import__('os').system('true')", "is not allowed"), ("x+1", "'x' is not allowed"), ("1/0", "division by zero"),
    ("9**9**9", "too large"), ("2**100000", "too large"), ("(-8)**0.5", "not a real number"), ("1 +", "not an arithmetic"),
    ("'a'*3", "is not allowed"), ("1e308*10", "overflows"), ("[1][0]", "is not allowed"), ("1" * 600, "longer than 500"),
])
def test_calculator_refuses(expression, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expression)


def test_calculator_is_a_function_tool_with_its_schema():
    tool = load_all_tools(None, "hybridrl.rollout.tools.builtin.calculator")["calculator"]
    assert tool.tool_schema.to_dict()["function"]["parameters"]["required"] == ["expression"]


def gsm8k_session(ground_truth: str | None = "72") -> ToolSession:
    tool = Gsm8kTool()
    kwargs = {} if ground_truth is None else {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": ground_truth}}}
    return ToolSession({tool.name: tool}, kwargs, ToolExecutors(1), ToolSettings())


def test_gsm8k_tool_penalises_answers_that_do_not_improve_within_a_trajectory():
    session = gsm8k_session()

    async def trajectory():
        answers = ["70", "72", "#### 72", "72.0"]
        results = [await session.call(ToolCall("calc_gsm8k_reward", f'{{"answer": "{a}"}}')) for a in answers]
        return results, await session.close()

    results, final = asyncio.run(trajectory())
    assert [r.text for r in results] == ["Current parsed answer='70' reward=0.0", "Current parsed answer='72' reward=1.0",
                                         "Current parsed answer='#### 72' reward=1.0",
                                         "Current parsed answer='72.0' reward=0.0"]
    # 0.0 is no improvement on the starting 0 (-0.05); 1.0 improves (0); 1.0 again and then 0.0 do not (-0.05 each).
    assert [r.reward for r in results] == [-0.05, 0.0, -0.05, -0.05]
    assert final == {"calc_gsm8k_reward": 0.0}  # calc_reward at the end scores the last answer


def test_gsm8k_tool_accepts_numbers_and_needs_a_ground_truth():
    session = gsm8k_session()
    result = asyncio.run(session.call(ToolCall("calc_gsm8k_reward", '{"answer": 72}')))
    assert result.text == "Current parsed answer='72' reward=1.0" and result.reward == 0.0
    missing = asyncio.run(gsm8k_session(None).call(ToolCall("calc_gsm8k_reward", '{"answer": "1"}')))
    assert missing.error == "exception" and "extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs" in missing.text


def test_gsm8k_tool_direct_create_signature():
    tool = Gsm8kTool()

    async def use():
        instance, _ = await tool.create(ground_truth="5")
        return await tool.execute(instance, {"answer": "5"}), await tool.calc_reward(instance)

    (response, reward, metrics), final = asyncio.run(use())
    assert (response.text, reward, metrics, final) == ("Current parsed answer='5' reward=1.0", 0.0, {}, 1.0)
