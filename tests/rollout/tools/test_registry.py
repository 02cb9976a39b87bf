"""Loading tools: verl's tool YAML (verl's class names mapped), function tools from a file or module, the
verl.tools.* imports of tool code written for verl, and the errors a wrong config gets."""

from __future__ import annotations

import asyncio
import logging
import os
import textwrap

import pytest

from hybridrl.rollout.tools import BaseTool, ToolCall, ToolSession, ToolSettings, load_all_tools
from hybridrl.rollout.tools.builtin.gsm8k import Gsm8kTool
from hybridrl.rollout.tools.executors import ToolExecutors
from hybridrl.rollout.tools.function_tool import FunctionTool

# verl's examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml, verbatim.
VERL_GSM8K_TOOL_YAML = """\
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config: 
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if parsed answer is incorrect or not correctly parsed)"
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The model's answer to the GSM8K math problem, must be a digits"
          required: ["answer"]
"""


def write(path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_verl_gsm8k_tool_yaml_loads_as_hybridrl_tool(tmp_path, caplog, monkeypatch):
    from hybridrl.rollout.tools import verl_compat

    monkeypatch.setattr(verl_compat, "_announced", set())  # the notice is given once per process
    with caplog.at_level(logging.INFO, logger="hybridrl.rollout.tools"):
        tools = load_all_tools(write(tmp_path / "gsm8k_tool_config.yaml", VERL_GSM8K_TOOL_YAML), None)
    tool = tools["calc_gsm8k_reward"]
    assert isinstance(tool, Gsm8kTool) and tool.config == {"type": "native"}
    assert tool.tool_schema.to_dict()["function"]["parameters"]["required"] == ["answer"]
    assert "verl.tools.gsm8k_tool.Gsm8kTool is verl's; using hybridrl's hybridrl.rollout.tools.builtin.gsm8k.Gsm8kTool" \
        in caplog.text


@pytest.mark.parametrize(("entry", "message"), [
    ('class_name: "my_tools.nowhere.Tool"', "tool class 'my_tools.nowhere.Tool': cannot import module 'my_tools.nowhere'"),
    ('class_name: "hybridrl.rollout.tools.base.NoSuchTool"',
     "module 'hybridrl.rollout.tools.base' has no class 'NoSuchTool'"),
    ('class_name: "verl.tools.search_tool.SearchTool"', "verl's retrieval search tool has no hybridrl equivalent"),
    ('class_name: "Gsm8kTool"', "class_name must be an import path"),
    ('class_name: "hybridrl.rollout.tools.builtin.gsm8k.Gsm8kTool"\n    config: {type: mcp}',
     "config.type='mcp'; only native tools exist"),
])
def test_tool_yaml_errors_name_the_problem(tmp_path, entry, message):
    path = write(tmp_path / "tools.yaml", f"tools:\n  - {entry}\n")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_all_tools(path, None)


def test_tool_yaml_shape_errors(tmp_path):
    with pytest.raises(ValueError, match=r"a tool config holds `tools:`"):
        load_all_tools(write(tmp_path / "a.yaml", "- class_name: x.Y\n"), None)
    with pytest.raises(FileNotFoundError, match="tool_config_path='/nope.yaml' does not exist"):
        load_all_tools("/nope.yaml", None)
    bad_schema = 'tools:\n  - class_name: "hybridrl.rollout.tools.builtin.gsm8k.Gsm8kTool"\n    tool_schema: ' \
                 '{type: function, function: {name: f, parameters: {type: object, properties: {a: {type: str}}}}}\n'
    with pytest.raises(ValueError, match="argument 'a' has type 'str'; JSON schema types are string, number"):
        load_all_tools(write(tmp_path / "b.yaml", bad_schema), None)


def test_function_tools_from_a_file(tmp_path):
    path = write(tmp_path / "fns.py", '''
        from hybridrl.rollout.tools import function_tool

        @function_tool
        def lookup(city: str, metric: bool = True) -> dict:
            """Weather of a city.

            Args:
                city: The city.
                metric: Celsius when true.
            """
            return {"city": city, "celsius": metric}

        def helper(x: int) -> int:
            """Not a tool: the file marks its tools.

            Args:
                x: Anything.
            """
            return x
    ''')
    tools = load_all_tools(None, path)
    assert list(tools) == ["lookup"]
    schema = tools["lookup"].tool_schema.to_dict()["function"]
    assert schema["description"] == "Weather of a city."
    assert schema["parameters"]["properties"] == {"city": {"type": "string", "description": "The city."},
                                                  "metric": {"type": "boolean", "description": "Celsius when true."}}
    assert schema["parameters"]["required"] == ["city"]


def test_plain_typed_functions_are_tools_when_none_is_marked(tmp_path):
    path = write(tmp_path / "plain.py", '''
        import math

        def area(radius: float) -> float:
            """Area of a circle.

            Args:
                radius: Its radius.
            """
            return math.pi * radius ** 2

        def _private(x: int) -> int:
            return x
    ''')
    assert list(load_all_tools(None, path)) == ["area"]  # math.* and _private are not offered


def test_function_tool_errors(tmp_path):
    with pytest.raises(ValueError, match=r"function tool 'f' .* cannot build its schema .* Google-style docstring"):
        load_all_tools(None, write(tmp_path / "nodoc.py", "def f(x: int) -> int:\n    return x\n"))
    with pytest.raises(ValueError, match=r"takes \*args: a tool schema needs named arguments"):
        load_all_tools(None, write(tmp_path / "var.py", 'def f(*args) -> int:\n    """F.\n\n    Args:\n        args: A.\n    """\n'))
    with pytest.raises(ValueError, match="defines no public function"):
        load_all_tools(None, write(tmp_path / "empty.py", "X = 1\n"))
    with pytest.raises(FileNotFoundError, match="function_tool_path='/nope.py' does not exist"):
        load_all_tools(None, "/nope.py")


def test_a_tool_name_defined_twice_is_an_error(tmp_path):
    path = write(tmp_path / "dup.py", '''
        def calc_gsm8k_reward(answer: str) -> str:
            """Shadow.

            Args:
                answer: A.
            """
            return answer
    ''')
    with pytest.raises(ValueError, match="tool name 'calc_gsm8k_reward' is defined twice"):
        load_all_tools(write(tmp_path / "t.yaml", VERL_GSM8K_TOOL_YAML), path)


def test_tool_code_written_for_verl_loads(tmp_path, monkeypatch):
    write(tmp_path / "verl_style_tools.py", '''
        from verl.tools.base_tool import BaseTool
        from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

        class EchoTool(BaseTool):
            def __init__(self, config, tool_schema: OpenAIFunctionToolSchema):
                super().__init__(config, tool_schema)

            async def execute(self, instance_id, parameters, **kwargs):
                return ToolResponse(text=parameters["text"][::-1]), 0.0, {}
    ''')
    fns = write(tmp_path / "verl_fns.py", '''
        from verl.tools.function_tool import function_tool

        @function_tool
        def shout(text: str) -> str:
            """Upper-case.

            Args:
                text: Input.
            """
            return text.upper()
    ''')
    monkeypatch.syspath_prepend(str(tmp_path))
    yaml_path = write(tmp_path / "t.yaml", '''
        tools:
          - class_name: verl_style_tools.EchoTool
            config: {type: native}
            tool_schema: {type: function, function: {name: echo, description: Echo., parameters: {type: object,
              properties: {text: {type: string}}, required: [text]}}}
    ''')
    tools = load_all_tools(yaml_path, fns)
    session = ToolSession(tools, {}, ToolExecutors(1), ToolSettings())
    echo = asyncio.run(session.call(ToolCall("echo", '{"text": "abc"}')))
    shout = asyncio.run(session.call(ToolCall("shout", '{"text": "abc"}')))
    assert (echo.text, shout.text) == ("cba", "ABC") and isinstance(tools["echo"], BaseTool)
    assert "verl" not in __import__("sys").modules  # the verl names existed only while the tool code loaded


def test_a_process_tool_runs_in_another_process(tmp_path):
    path = write(tmp_path / "heavy.py", '''
        import os
        from hybridrl.rollout.tools import function_tool

        @function_tool(executor="process")
        def where(n: int) -> str:
            """The process id, after some CPU work.

            Args:
                n: Work size.
            """
            return f"{sum(i * i for i in range(n))} {os.getpid()}"
    ''')
    tools = load_all_tools(None, path)
    assert isinstance(tools["where"], FunctionTool) and tools["where"].executor == "process"
    executors = ToolExecutors(1)
    try:
        result = asyncio.run(ToolSession(tools, {}, executors, ToolSettings(timeout_s=120)).call(ToolCall("where", '{"n": 10}')))
    finally:
        executors.shutdown()
    assert result.error is None, result.text
    total, pid = result.text.split()
    assert total == "285" and int(pid) != os.getpid()
