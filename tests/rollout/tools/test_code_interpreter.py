"""The sandboxed code tool end to end: a tool_agent trajectory calls `code_interpreter` (verl's tool YAML) and reads
what its program printed, run by the local sandbox and by a real SandboxFusion-compatible server on loopback
(`python -m hybridrl.rewards.sandbox.server` in a subprocess); limits and failures reach the model as text."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest
import yaml

from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.rollout.tools.builtin.code_interpreter import CodeInterpreterTool, retool_code
from hybridrl.rollout.tools.registry import load_all_tools
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config, tool_call

VERL_SCHEMA = {"type": "function", "function": {
    "name": "code_interpreter", "description": "A tool for executing code.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "The code to execute."}},
                   "required": ["code"]}}}


def tool_yaml(path, class_name: str = "verl.tools.sandbox_fusion_tools.SandboxFusionTool", **config) -> str:
    """verl's sandbox_fusion_tool_config.yaml with `config` changed (a None value removes the key)."""
    settings = {"num_workers": 4, "enable_global_rate_limit": True, "rate_limit": 4, "default_timeout": 10,
                "default_language": "python", "memory_limit_mb": 1024, "type": "native", **config}
    settings = {key: value for key, value in settings.items() if value is not None}
    path.write_text(yaml.safe_dump({"tools": [{"class_name": class_name, "config": settings,
                                               "tool_schema": VERL_SCHEMA}]}))
    return str(path)


def run_code_trajectories(tokenizer, tools_path: str, programs: list[str]) -> tuple[list[str], dict]:
    """One tool_agent trajectory per program: the model runs it, then answers with what it read. Returns each
    trajectory's tool response and the step's metrics."""

    def respond(text: str, turn: int) -> str:
        if turn == 0:
            index = int(re.search(r"program (\d+)", text).group(1))
            return tool_call("code_interpreter", code=programs[index]) + "<|im_end|>"
        return "done<|im_end|>"

    prompts = Batch(non_tensors={"raw_prompt": [[{"role": "user", "content": f"program {i}"}] for i in range(len(programs))],
                                 "agent_name": ["tool_agent"] * len(programs)})
    config = rollout_config(response_length=1024, tool_config_path=tools_path, max_tool_response_length=400)
    manager = AgentLoopManager(ScriptedEngine(tokenizer, respond), tokenizer, config, model_type="qwen2")
    try:
        batch = manager.generate_sequences(prompts)
    finally:
        manager.close()
    width = batch["prompts"].shape[1]
    texts = []
    for row in range(len(programs)):
        length = int(batch["attention_mask"][row, width:].sum())
        text = tokenizer.decode(batch["responses"][row, :length].tolist(), skip_special_tokens=False)
        texts.append(re.search(r"<tool_response>(.*?)</tool_response>", text, re.DOTALL).group(1))
    return texts, batch.meta["metrics"]


PROGRAMS = ["print(sum(range(10)) * 2)", "import sys\nprint('to stderr', file=sys.stderr)\nraise SystemExit(3)",
            "1/0"]


def check_outputs(texts: list[str]) -> None:
    assert texts[0].strip() == "90"
    assert "to stderr" in texts[1]  # stdout then stderr, as verl's tool shows them
    assert "ZeroDivisionError" in texts[2]  # the traceback is what the model reads


def test_a_trajectory_runs_code_in_the_local_sandbox(chatml_tokenizer, tmp_path):
    texts, metrics = run_code_trajectories(chatml_tokenizer, tool_yaml(tmp_path / "t.yaml", sandbox_fusion_url=None),
                                           PROGRAMS)
    check_outputs(texts)
    assert metrics["agent_loop/tool_errors/total"] == 0 and metrics["agent_loop/num_tool_calls/mean"] == 1


@pytest.fixture(scope="module")
def fusion_server():
    """The SandboxFusion-compatible server in its own process on a free loopback port."""
    server = subprocess.Popen([sys.executable, "-m", "hybridrl.rewards.sandbox.server", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/run_code)", line)
        assert found, line + server.stdout.read() if server.poll() is not None else line
        yield found.group(1)
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()


def test_a_trajectory_runs_code_through_a_sandbox_fusion_server(chatml_tokenizer, tmp_path, fusion_server):
    texts, metrics = run_code_trajectories(chatml_tokenizer, tool_yaml(tmp_path / "t.yaml",
                                                                       sandbox_fusion_url=fusion_server), PROGRAMS)
    check_outputs(texts)
    assert metrics["agent_loop/tool_errors/total"] == 0


def test_limits_from_the_tool_config_stop_programs_and_the_model_is_told(chatml_tokenizer, tmp_path):
    programs = ["while True:\n    pass", "x = bytearray(400 * 1024 * 1024)\nprint(len(x))", "print('quick')"]
    path = tool_yaml(tmp_path / "t.yaml", sandbox_fusion_url=None, default_timeout=2, memory_limit_mb=200)
    texts, metrics = run_code_trajectories(chatml_tokenizer, path, programs)
    assert "Execution" in texts[0] and ("timed out" in texts[0] or "CPU time limit" in texts[0])
    assert "MemoryError" in texts[1] or "memory limit exceeded" in texts[1]
    assert texts[2].strip() == "quick"
    assert metrics["agent_loop/tool_errors/total"] == 0  # the programs failed, not the tool


def test_no_network_where_the_machine_allows_it(tmp_path):
    tool = load_all_tools(tool_yaml(tmp_path / "t.yaml", sandbox_fusion_url=None), None)["code_interpreter"]
    if not tool.sandbox.isolation.network_namespace:
        pytest.skip(f"this machine gives the sandbox no network namespace: {tool.sandbox.isolation.describe()}")
    code = ("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('connected')\n"
            "except OSError as e:\n    print('no network:', type(e).__name__)")
    response, _, _ = asyncio.run(tool.execute("i", {"code": code}))
    assert response.text.startswith("no network")


def test_an_unreachable_sandbox_service_is_a_counted_tool_error(chatml_tokenizer, tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tool_yaml(tmp_path / "t.yaml", sandbox_fusion_url=f"http://127.0.0.1:{port}/run_code")
    texts, metrics = run_code_trajectories(chatml_tokenizer, path, ["print(1)"])
    assert texts[0].startswith("Error executing tool 'code_interpreter': the SandboxFusion service at")
    assert metrics["agent_loop/tool_errors/exception"] == 1


def test_retool_class_and_input_handling(tmp_path):
    tools = load_all_tools(tool_yaml(tmp_path / "t.yaml", class_name="recipe.retool.retool.CustomSandboxFusionTool",
                                     sandbox_fusion_url=None), None)
    tool = tools["code_interpreter"]
    assert isinstance(tool, CodeInterpreterTool) and tool.retool
    assert retool_code("Let me compute.\n```python\nx = 6\nx * 7\n```\nthen") == "x = 6\nprint(x * 7)"
    assert retool_code("print(1)\n\n") == "print(1)\n\n"
    response, _, _ = asyncio.run(tool.execute("i", {"code": "```python\nsum([1, 2, 3])\n```"}))
    assert response.text.strip() == "6"


def test_the_models_timeout_is_capped_by_the_config(tmp_path):
    tool = CodeInterpreterTool({"default_timeout": 5}, None)
    assert tool._limits(1000).wall_seconds == 5 and tool._limits(1).wall_seconds == 1
    assert tool._limits("soon").wall_seconds == 5
    with pytest.raises(ValueError, match="default_timeout=0 must be a positive number"):
        CodeInterpreterTool({"default_timeout": 0}, None)
