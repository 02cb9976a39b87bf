"""A trajectory's tool session on its own: verl's truncation, return values checked, error kinds, the
lifecycle's failure paths."""

from __future__ import annotations

import asyncio

import pytest

from hybridrl.rollout.tools import BaseTool, ToolCall, ToolResponse, ToolSession, ToolSettings
from hybridrl.rollout.tools.executors import ToolExecutors
from hybridrl.rollout.tools.function_tool import make_function_tool
from hybridrl.rollout.tools.session import truncate_response

SCHEMA = {"type": "function", "function": {"name": "t", "description": "T.", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(("side", "expected"), [("left", "(truncated)...789"), ("right", "012...(truncated)"),
                                                ("middle", "0...(truncated)...9")])
def test_truncation_keeps_max_chars_characters_as_verl(side, expected):
    assert truncate_response("0123456789", 3, side) == expected
    assert truncate_response("0123456789", 10, side) == "0123456789"


def test_middle_truncation_of_one_character_drops_everything():
    # verl's text[-0:] would keep the whole text here
    assert truncate_response("0123456789", 1, "middle") == "...(truncated)..."


def session_of(*tools, timeout_s: float = 5.0, tools_kwargs=None) -> ToolSession:
    return ToolSession({tool.name: tool for tool in tools}, tools_kwargs or {}, ToolExecutors(2),
                       ToolSettings(timeout_s=timeout_s))


def fn_tool(fn):
    return make_function_tool(fn, schema=dict(SCHEMA, function=dict(SCHEMA["function"], name=fn.__name__)))


def call(session: ToolSession, name: str, arguments: str = "{}"):
    return asyncio.run(session.call(ToolCall(name, arguments)))


@pytest.mark.parametrize(("value", "text", "reward"), [
    ("plain", "plain", None), (ToolResponse(text="resp"), "resp", None), ({"a": 1}, '{"a": 1}', None),
    ([1, 2], "[1, 2]", None), (3.5, "3.5", None), (True, "True", None), (("r", 0.5), "r", 0.5),
    (("r", None, {"m": 1}), "r", None), (("r",), "r", None),
])
def test_function_returns_that_are_accepted(value, text, reward):
    def ret() -> str:
        return value

    result = call(session_of(fn_tool(ret)), "ret")
    assert (result.text, result.reward, result.error) == (text, reward, None)


@pytest.mark.parametrize(("value", "message"), [
    (None, "returned NoneType None; return a str"), (object(), "returned object"),
    (("a", 1, {}, 4), "returned a tuple of 4 items"), (("a", float("nan")), "returned reward float nan"),
    (("a", 1.0, [1]), "returned metrics list [1]"), (b"bytes", "returned bytes"),
    (ToolResponse(text="x", image=["img"]), "multimodal tool output is not supported"),
    ({"a": object()}, "returned a dict that is not JSON"),
])
def test_garbage_returns_are_invalid_return_errors(value, message):
    def ret() -> str:
        return value

    result = call(session_of(fn_tool(ret)), "ret")
    assert result.error == "invalid_return" and message in result.text
    assert result.text.startswith("Error executing tool 'ret': ")


def test_a_timeout_raised_by_the_tool_is_its_own_exception_not_the_sessions():
    async def slow_api() -> str:
        raise TimeoutError("upstream did not answer")

    session = session_of(fn_tool(slow_api), timeout_s=5.0)
    result = call(session, "slow_api")
    assert result.error == "exception" and result.text == "Error executing tool 'slow_api': upstream did not answer"
    assert session.error_counts == {"exception": 1}


class FlakyCreate(BaseTool):
    """create fails once; calc_reward and release fail."""

    def __init__(self):
        super().__init__({}, SCHEMA)
        self.creates = 0

    async def create(self, instance_id=None, **kwargs):
        self.creates += 1
        if self.creates == 1:
            raise ConnectionError("sandbox unavailable")
        return await super().create(instance_id)

    async def calc_reward(self, instance_id, **kwargs):
        raise ValueError("no score")

    async def release(self, instance_id, **kwargs):
        raise RuntimeError("already gone")


def test_a_failed_creation_is_retried_and_end_of_trajectory_failures_are_counted(caplog):
    tool = FlakyCreate()
    session = session_of(tool)

    async def trajectory():
        return await session.call(ToolCall("t")), await session.call(ToolCall("t")), await session.close()

    first, second, rewards = asyncio.run(trajectory())
    assert first.error == "exception" and "sandbox unavailable" in first.text
    assert second.error is None and second.text == "Updated the tool state."
    assert rewards == {"t": None}
    assert session.error_counts == {"exception": 1, "calc_reward_failed": 1, "release_failed": 1}
    assert "calc_reward" in caplog.text and "agent_loop/tool_errors/calc_reward_failed" in caplog.text


def test_parallel_calls_share_one_instance():
    class Slow(BaseTool):
        def __init__(self):
            super().__init__({}, SCHEMA)
            self.created = []

        async def create(self, instance_id=None, **kwargs):
            await asyncio.sleep(0.01)
            instance_id, response = await super().create(instance_id)
            self.created.append(instance_id)
            return instance_id, response

        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text=instance_id), 0.0, {}

    tool = Slow()
    session = session_of(tool)

    async def three_calls():
        return await asyncio.gather(*(session.call(ToolCall("t")) for _ in range(3)))

    results = asyncio.run(three_calls())
    assert len(tool.created) == 1 and {r.text for r in results} == set(tool.created)


def test_the_execute_contract_is_checked():
    class Wrong(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return "text only"

    result = call(session_of(Wrong({}, SCHEMA)), "t")
    assert result.error == "invalid_return"
    assert "execute returned str 'text only'; it must return (ToolResponse, reward, metrics)" in result.text
