"""docs/agentic.md's examples as written: the agent loop, the stateful tool and its YAML, the function tool."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import yaml

from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config, tool_call

DOC = Path(__file__).resolve().parents[3] / "docs" / "agentic.md"


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def block_with(language: str, needle: str) -> str:
    return next(block for block in code_blocks(language) if needle in block)


def fresh_package(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    """`my_pkg` (as the doc names it) in tmp_path, importable, replacing another test's."""
    import sys

    for name in [n for n in sys.modules if n == "my_pkg" or n.startswith("my_pkg.")]:
        monkeypatch.delitem(sys.modules, name)
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / "my_pkg" / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_the_agent_loop_example_runs(chatml_tokenizer, tmp_path, monkeypatch):
    from hybridrl.rollout.agent import registry

    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))  # the example's @register is undone
    fresh_package(tmp_path, monkeypatch, {"loops.py": block_with("python", "class SelfCheckLoop")})
    loops_yaml = tmp_path / "loops.yaml"
    loops_yaml.write_text(block_with("yaml", "SelfCheckLoop"))
    assert yaml.safe_load(loops_yaml.read_text())[0]["max_rounds"] == 3
    engine = ScriptedEngine(chatml_tokenizer, lambda text, turn: f"answer {turn}<|im_end|>")
    manager = AgentLoopManager(engine, chatml_tokenizer, rollout_config(agent_loop_config_path=str(loops_yaml)),
                               model_type="qwen2")
    batch = manager.generate_sequences(Batch(non_tensors={"raw_prompt": [[{"role": "user", "content": "2+2?"}]],
                                                          "agent_name": ["self_check"]}))
    manager.close()
    assert list(batch["__num_turns__"]) == [6] and len(engine.requests) == 3
    text = chatml_tokenizer.decode(batch["responses"][0][batch["response_mask"][0].bool()])
    assert text == "answer 0<|im_end|>answer 1<|im_end|>answer 2<|im_end|>"


def test_the_tool_examples_run(chatml_tokenizer, tmp_path, monkeypatch):
    fresh_package(tmp_path, monkeypatch, {"tools.py": block_with("python", "class Inventory")})
    (tmp_path / "my_tools.py").write_text(block_with("python", "def lookup_price"))
    (tmp_path / "tools.yaml").write_text(textwrap.dedent(block_with("yaml", "add_to_cart")))

    def respond(text, turn):
        calls = [tool_call("add_to_cart", item="pen", count=2) + tool_call("lookup_price", item="pen"),
                 tool_call("add_to_cart", item="ink", count=1)]
        return (calls[turn] if turn < 2 else "done") + "<|im_end|>"

    config = rollout_config(response_length=600, default_agent_loop="tool_agent", max_parallel_calls=2,
                            tool_config_path=str(tmp_path / "tools.yaml"), function_tool_path=str(tmp_path / "my_tools.py"))
    prompts = Batch(non_tensors={"raw_prompt": [[{"role": "user", "content": "shop"}]],
                                 "extra_info": [{"tools_kwargs": {"add_to_cart": {"create_kwargs": {"gift": 1}}}}]})
    manager = AgentLoopManager(ScriptedEngine(chatml_tokenizer, respond), chatml_tokenizer, config, model_type="qwen2")
    batch = manager.generate_sequences(prompts)
    manager.close()
    text = chatml_tokenizer.decode(batch["responses"][0], skip_special_tokens=False)
    assert "<tool_response>cart: {'gift': 1, 'pen': 2}</tool_response>" in text
    assert '<tool_response>{"item": "pen", "price": 3.5, "currency": "USD"}</tool_response>' in text
    assert "<tool_response>cart: {'gift': 1, 'pen': 2, 'ink': 1}</tool_response>" in text
    assert batch["extra_info"][0]["tool_reward_scores"] == {"add_to_cart": 3.0}
