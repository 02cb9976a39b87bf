"""Tools inside trajectories: the per-trajectory lifecycle and tools_kwargs, tool errors told to the model and
counted, a slow tool not holding up other trajectories, per-row tool selection."""

from __future__ import annotations

import asyncio
import threading

import pytest
import yaml

from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.utils.batch import Batch
from tests.rollout.agent import tool_fixtures
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config, tool_call

FIXTURES = "tests.rollout.agent.tool_fixtures"
NO_ARGS = {"type": "object", "properties": {}}


def write_tool_yaml(path, classes: dict[str, str]) -> str:
    tools = [{"class_name": f"{FIXTURES}.{cls}", "config": {"type": "native"},
              "tool_schema": {"type": "function", "function": {"name": name, "description": f"{name}.",
                                                                "parameters": NO_ARGS}}}
             for name, cls in classes.items()]
    path.write_text(yaml.safe_dump({"tools": tools}))
    return str(path)


def questions(rows: int, extra_info=None) -> Batch:
    return Batch(non_tensors={
        "raw_prompt": [[{"role": "user", "content": f"q{i}"}] for i in range(rows)],
        "agent_name": ["tool_agent"] * rows,
        "extra_info": extra_info or [{"index": i} for i in range(rows)]})


def generate(tokenizer, respond, prompts, engine_kwargs=None, **config):
    engine = ScriptedEngine(tokenizer, respond, **(engine_kwargs or {}))
    manager = AgentLoopManager(engine, tokenizer, rollout_config(response_length=512, **config), model_type="qwen2")
    try:
        return manager.generate_sequences(prompts), engine
    finally:
        manager.close()


def text_of(tokenizer, batch, row=0) -> str:
    width = batch["prompts"].shape[1]
    length = int(batch["attention_mask"][row, width:].sum())
    return tokenizer.decode(batch["responses"][row, :length].tolist(), skip_special_tokens=False)


def test_tools_kwargs_reach_create_and_the_instance_lives_for_the_trajectory(chatml_tokenizer, tmp_path):
    tool_fixtures.EVENTS.clear()
    respond = lambda text, turn: tool_call("counter") + "<|im_end|>" if turn < 2 else "bye<|im_end|>"  # noqa: E731
    extra = [{"tools_kwargs": {"counter": {"create_kwargs": {"secret": f"s{i}"},
                                           "calc_reward_kwargs": {"scale": i}}}} for i in range(2)]
    batch, _ = generate(chatml_tokenizer, respond, questions(2, extra),
                        tool_config_path=write_tool_yaml(tmp_path / "tools.yaml", {"counter": "CountingTool"}))
    for row in range(2):
        text = text_of(chatml_tokenizer, batch, row)
        assert f"call 1 secret s{row}" in text and f"call 2 secret s{row}" in text  # state kept between calls
    events = tool_fixtures.EVENTS
    creates = [e for e in events if e[0] == "create"]
    assert sorted(e[2]["create_kwargs"]["secret"] for e in creates) == ["s0", "s1"]  # once per trajectory
    for _, instance, _ in creates:
        mine = [e[0] for e in events if e[1] == instance]
        assert mine == ["create", "execute", "execute", "calc_reward", "release"]
    assert sorted(e[2]["scale"] for e in events if e[0] == "calc_reward") == [0, 1]
    assert [info["tool_reward_scores"] for info in batch["extra_info"]] == [{"counter": 2.0}, {"counter": 2.0}]
    assert [info["tool_rewards"] for info in batch["extra_info"]] == [[0.5, 0.5], [0.5, 0.5]]
    assert [info["num_turns"] for info in batch["extra_info"]] == [6, 6]
    assert list(batch["tool_reward_scores"]) == [{"counter": 2.0}, {"counter": 2.0}]


@pytest.mark.parametrize(("call", "kind", "message"), [
    (tool_call("nope"), "unknown_tool", "Unknown function 'nope'. Available tools: ['raiser', 'hanger', 'junk'"),
    ('<tool_call>{"name": "raiser", "arguments": {"x": </tool_call>', "invalid_arguments",
     "Invalid JSON in arguments for 'raiser'"),
    ('<tool_call>{"name": "raiser", "arguments": "[1, 2]"}</tool_call>', "invalid_arguments",
     "Invalid JSON in arguments for 'raiser': expected a JSON object, got list"),
    (tool_call("raiser"), "exception", "Error executing tool 'raiser': disk on fire"),
    (tool_call("hanger"), "timeout", "Error executing tool 'hanger': timed out after 0.3 s"),
    (tool_call("junk"), "invalid_return", "Error executing tool 'junk': execute returned object"),
    (tool_call("garbage", x=1), "invalid_return", "Error executing tool 'garbage': returned NoneType None"),
])
def test_a_failing_tool_call_is_told_to_the_model_counted_and_the_loop_goes_on(chatml_tokenizer, tmp_path, call, kind,
                                                                               message):
    respond = lambda text, turn: call + "<|im_end|>" if turn == 0 else "sorry<|im_end|>"  # noqa: E731
    tools = write_tool_yaml(tmp_path / "tools.yaml", {"raiser": "RaisingTool", "hanger": "HangingTool",
                                                      "junk": "GarbageTool"})
    batch, engine = generate(chatml_tokenizer, respond, questions(1), tool_config_path=tools,
                             function_tool_path=f"{FIXTURES}", tool_call_timeout=0.3)
    text = text_of(chatml_tokenizer, batch)
    assert f"<tool_response>{message}" in text
    assert text.endswith("sorry<|im_end|>") and len(engine.requests) == 2
    metrics = batch.meta["metrics"]
    assert metrics[f"agent_loop/tool_errors/{kind}"] == 1.0 and metrics["agent_loop/tool_errors/total"] == 1.0


def test_a_hanging_thread_tool_is_cut_off(chatml_tokenizer):
    respond = lambda text, turn: tool_call("blocking_forever", x=1) + "<|im_end|>" if turn == 0 else "ok<|im_end|>"  # noqa: E731
    tool_fixtures.SLOW_RELEASE["forever"] = threading.Event()
    try:
        batch, _ = generate(chatml_tokenizer, respond, questions(1), function_tool_path=FIXTURES,
                            tool_call_timeout=0.3)
    finally:
        tool_fixtures.SLOW_RELEASE["forever"].set()  # let the abandoned thread finish
    assert "Error executing tool 'blocking_forever': timed out after 0.3 s" in text_of(chatml_tokenizer, batch)
    assert batch.meta["metrics"]["agent_loop/tool_errors/timeout"] == 1.0


@pytest.mark.parametrize("tool", ["slow_async", "slow_sync"])
def test_a_slow_tool_does_not_hold_up_other_trajectories(chatml_tokenizer, tool):
    """Row 0's tool waits until every other trajectory has finished both of its turns; were tools run on (or
    blocking) the event loop, the others could not proceed and the tool would time out instead."""
    rows = 6
    tool_fixtures.SLOW_RELEASE.update({"async": asyncio.Event(), "thread": threading.Event()})

    def respond(text, turn):
        if turn > 0:
            return "done<|im_end|>"
        return tool_call(tool if "q0" in text else "add", **({"x": 0} if "q0" in text else {"a": 1, "b": 2})) \
            + "<|im_end|>"

    def release_when_others_done(engine):
        if engine.served == 1 + 2 * (rows - 1):  # row 0's first turn and both turns of every other row
            tool_fixtures.SLOW_RELEASE["async"].set()
            tool_fixtures.SLOW_RELEASE["thread"].set()

    batch, engine = generate(chatml_tokenizer, respond, questions(rows), function_tool_path=FIXTURES,
                             tool_call_timeout=30, engine_kwargs={"on_served": release_when_others_done,
                                                                  "delay_s": 0.01})
    assert "<tool_response>released</tool_response>" in text_of(chatml_tokenizer, batch, 0)
    assert all("<tool_response>3</tool_response>" in text_of(chatml_tokenizer, batch, i) for i in range(1, rows))
    assert engine.max_in_flight == rows  # every trajectory's first turn was in the engine at once


def test_tool_selection_limits_a_row_to_its_tools(chatml_tokenizer):
    respond = lambda text, turn: tool_call("add", a=1, b=1) + "<|im_end|>" if turn == 0 else "k<|im_end|>"  # noqa: E731
    extra = [{"tool_selection": ["garbage"]}, {}]
    batch, engine = generate(chatml_tokenizer, respond, questions(2, extra), function_tool_path=FIXTURES)
    texts = [chatml_tokenizer.decode(r.prompt_ids) for r in engine.requests]
    first_turns = {text.split("user\n")[-1][:2]: text for text in texts if text.count("<|im_start|>assistant") == 1}
    assert "garbage(x)" in first_turns["q0"] and "add(a, b)" not in first_turns["q0"]
    assert "add(a, b)" in first_turns["q1"] and "garbage(x)" in first_turns["q1"]
    assert "Unknown function 'add'. Available tools: ['garbage']" in text_of(chatml_tokenizer, batch, 0)
    assert "<tool_response>2</tool_response>" in text_of(chatml_tokenizer, batch, 1)


def test_tool_selection_naming_an_unconfigured_tool_is_an_error(chatml_tokenizer):
    from hybridrl.rollout.agent import AgentLoopError

    with pytest.raises(AgentLoopError, match=r"tool_selection names tools \['search'\] that are not configured"):
        generate(chatml_tokenizer, lambda text, turn: "x<|im_end|>", questions(1, [{"tool_selection": ["search"]}]),
                 function_tool_path=FIXTURES)
