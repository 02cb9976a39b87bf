"""The manager: one training row per trajectory with verl's keys, loops chosen per row, custom loops from
verl's YAML, n samples per prompt, validation sampling, failures naming the row, metrics and the dump view."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
import yaml

from hybridrl.rollout.agent import AgentLoopError, AgentLoopManager, batch_rollout_turns, sampling_params_from_config
from hybridrl.rollout.base import SamplingParams
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, fake_log_prob, rollout_config, tool_call

VERL_KEYS = ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids",
             "rollout_log_probs")


def prompts_batch(contents: list[str], **fields) -> Batch:
    rows = len(contents)
    return Batch(non_tensors={"raw_prompt": [[{"role": "user", "content": c}] for c in contents],
                              "uid": [f"u{i}" for i in range(rows)], "data_source": ["toy"] * rows,
                              "extra_info": [{"index": i} for i in range(rows)], **fields})


def make_manager(tokenizer, respond, config=None, **engine_kwargs):
    engine = ScriptedEngine(tokenizer, respond, **engine_kwargs)
    return AgentLoopManager(engine, tokenizer, config or rollout_config(prompt_length=32, response_length=24),
                            model_type="qwen2"), engine


def test_single_turn_rows_have_verl_keys_shapes_and_padding(chatml_tokenizer):
    manager, engine = make_manager(chatml_tokenizer,
                                   lambda text, turn: "12<|im_end|>" if "first" in text else "3456789<|im_end|>")
    batch = manager.generate_sequences(prompts_batch(["first", "second"]))
    manager.close()
    for key in VERL_KEYS:
        assert key in batch
    assert batch["prompts"].shape == (2, 32) and batch["responses"].shape == (2, 24)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["position_ids"].shape == (2, 56)
    lengths = [len(chatml_tokenizer("12<|im_end|>")["input_ids"]), len(chatml_tokenizer("3456789<|im_end|>")["input_ids"])]
    for row, length in enumerate(lengths):
        assert batch["attention_mask"][row, 32:].tolist() == [1] * length + [0] * (24 - length)
        assert batch["response_mask"][row].tolist() == [1] * length + [0] * (24 - length)
        assert batch["rollout_log_probs"][row, :length].tolist() == pytest.approx([fake_log_prob(i) for i in range(length)])
        assert batch["rollout_log_probs"][row, length:].eq(0).all()
        prompt_text = chatml_tokenizer.apply_chat_template([{"role": "user", "content": ["first", "second"][row]}],
                                                           add_generation_prompt=True, tokenize=False)
        prompt_len = len(chatml_tokenizer(prompt_text, add_special_tokens=False)["input_ids"])
        assert batch["attention_mask"][row, :32].tolist() == [0] * (32 - prompt_len) + [1] * prompt_len  # left pad
    assert list(batch["__num_turns__"]) == [2, 2]
    assert list(batch["uid"]) == ["u0", "u1"] and list(batch["data_source"]) == ["toy", "toy"]  # input fields kept
    assert "rm_scores" not in batch
    assert engine.requests[0].params.max_new_tokens == 24


def test_n_trajectories_per_prompt_with_their_own_sampling_key(chatml_tokenizer, tmp_path):
    config_path = tmp_path / "loops.yaml"
    config_path.write_text(yaml.safe_dump([{"name": "scored", "_target_": "tests.rollout.agent.scored_loop.ScoredLoop",
                                            "bonus": 10.0}]))
    config = rollout_config(prompt_length=32, response_length=24, agent_loop_config_path=str(config_path))
    manager, engine = make_manager(chatml_tokenizer, lambda text, turn: "xy<|im_end|>", config)
    prompts = prompts_batch(["a", "b"], agent_name=["scored", "scored"])
    batch = manager.generate_sequences(prompts, SamplingParams(n=3, seed=7, row_offset=100))
    manager.close()
    assert len(batch) == 6 and list(batch["uid"]) == ["u0"] * 3 + ["u1"] * 3  # interleaved, like the rollout worker
    assert list(batch["row_offset"]) == [100, 101, 102, 103, 104, 105]
    assert {r.params.seed for r in engine.requests} == {7} and all(r.params.n == 1 for r in engine.requests)
    # The loop scored itself: rm_scores carries 10 + 3 tokens at the last response token of each row.
    assert torch.equal(batch["rm_scores"][:, 2], torch.full((6,), 13.0))
    assert batch["rm_scores"].sum().item() == 6 * 13.0


def test_each_row_runs_the_loop_its_agent_name_names(chatml_tokenizer):
    respond = lambda text, turn: tool_call("calculator", expression="6*7") + "<|im_end|>" if turn == 0 else "42<|im_end|>"  # noqa: E731
    config = rollout_config(prompt_length=64, response_length=200,
                            function_tool_path="hybridrl.rollout.tools.builtin.calculator")
    manager, engine = make_manager(chatml_tokenizer, respond, config)
    batch = manager.generate_sequences(prompts_batch(["a", "b", "c"], agent_name=["tool_agent", None, "single_turn_agent"]))
    manager.close()
    assert list(batch["__num_turns__"]) == [4, 2, 2]  # None -> default_agent_loop (single_turn_agent)
    assert list(batch["agent_name"]) == ["tool_agent", None, "single_turn_agent"]
    metrics = batch.meta["metrics"]
    assert metrics["num_turns/max"] == 4 and metrics["num_turns/min"] == 2
    assert metrics["num_turns/mean"] == pytest.approx(8 / 3)
    assert metrics["agent_loop/num_tool_calls/max"] == 1 and metrics["agent_loop/num_tool_calls/mean"] == pytest.approx(1 / 3)
    assert metrics["agent_loop/tool_errors/total"] == 0
    assert metrics["rollout/prefix_cache_hit_tokens"] == sum(len(r.prompt_ids) // 2 for r in engine.requests)
    for key in ("agent_loop/generate_sequences/mean", "agent_loop/tool_calls/max", "agent_loop/slowest/response_length",
                "timing_s/agent_loop"):
        assert key in metrics


def test_validation_samples_with_val_kwargs(chatml_tokenizer):
    config = rollout_config(prompt_length=32, response_length=8)
    config.temperature, config.val_kwargs.temperature, config.val_kwargs.n = 0.9, 0.0, 2
    manager, engine = make_manager(chatml_tokenizer, lambda text, turn: "z<|im_end|>", config)
    prompts = prompts_batch(["a"])
    prompts.meta["validate"] = True
    batch = manager.generate_sequences(prompts)
    manager.close()
    assert len(batch) == 2 and all(r.params.temperature == 0.0 and r.params.do_sample is False
                                   for r in engine.requests)
    assert sampling_params_from_config(config, validate=False).temperature == 0.9
    assert batch.meta["validate"] is True


def test_a_failing_row_fails_the_step_naming_it_and_aborts_the_others(chatml_tokenizer, tmp_path):
    class NeverAnswers:
        def __init__(self):
            self.aborted = []

        async def generate(self, request_id, prompt_ids, params):
            await asyncio.Event().wait()

        async def abort(self, request_id):
            self.aborted.append(request_id)

    config_path = tmp_path / "loops.yaml"
    config_path.write_text(yaml.safe_dump([{"name": "failing", "_target_": "tests.rollout.agent.scored_loop.FailingLoop"}]))
    engine = NeverAnswers()
    manager = AgentLoopManager(engine, chatml_tokenizer, rollout_config(agent_loop_config_path=str(config_path)))
    prompts = prompts_batch(["a", "b", "c"], agent_name=["failing"] * 3)
    with pytest.raises(AgentLoopError, match=r"agent loop 'failing' on row 1 \(data_source='toy', index=None\) failed: "
                                             r"KeyError: 'missing field'"):
        manager.generate_sequences(prompts)
    manager.close()
    assert engine.aborted == ["never-ends", "never-ends"]


def test_unknown_agent_names_are_errors(chatml_tokenizer):
    manager, _ = make_manager(chatml_tokenizer, lambda text, turn: "z<|im_end|>")
    with pytest.raises(AgentLoopError, match=r"row 0 has agent_name='react', which is not an agent loop; known: "
                                             r"\['single_turn_agent', 'tool_agent'\]"):
        manager.generate_sequences(prompts_batch(["a"], agent_name=["react"]))
    manager.close()
    config = rollout_config(default_agent_loop="react")
    with pytest.raises(ValueError, match="default_agent_loop='react' is not an agent loop"):
        AgentLoopManager(ScriptedEngine(chatml_tokenizer, None), chatml_tokenizer, config)


def test_agent_loop_config_errors(chatml_tokenizer, tmp_path):
    path = tmp_path / "loops.yaml"
    for content, message in [([{"name": "x"}], "entry 0 needs `name` and `_target_`"),
                             ([{"name": "x", "_target_": "tests.rollout.agent.helpers.ScriptedEngine"}],
                              "is not an agent loop class"),
                             ([{"name": "x", "_target_": "no_such_pkg.Loop"}], "cannot import 'no_such_pkg.Loop'"),
                             ({"name": "x"}, "is a list of {name, _target_, ...options} entries")]:
        path.write_text(yaml.safe_dump(content))
        with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("(", r"\(").replace(")", r"\)")):
            AgentLoopManager(ScriptedEngine(chatml_tokenizer, None), chatml_tokenizer,
                             rollout_config(agent_loop_config_path=str(path)))
    path.write_text(yaml.safe_dump([{"name": "s", "_target_": "tests.rollout.agent.scored_loop.ScoredLoop", "bonsu": 1}]))
    manager = AgentLoopManager(ScriptedEngine(chatml_tokenizer, lambda t, n: "z<|im_end|>"), chatml_tokenizer,
                               rollout_config(agent_loop_config_path=str(path)))
    with pytest.raises(AgentLoopError, match=r"ScoredLoop got options \['bonsu'\]"):
        manager.generate_sequences(prompts_batch(["a"], agent_name=["s"]))
    manager.close()


def test_rows_need_their_chat_messages(chatml_tokenizer):
    manager, _ = make_manager(chatml_tokenizer, lambda text, turn: "z<|im_end|>")
    with pytest.raises(AgentLoopError, match=r"needs each row's chat messages \(`raw_prompt`\): set data.return_raw_chat=True"):
        manager.generate_sequences(Batch(non_tensors={"data_source": np.array(["toy"], dtype=object)}))
    manager.close()


def test_rollout_dump_view_marks_the_trained_spans(chatml_tokenizer):
    respond = lambda text, turn: tool_call("calculator", expression="2+2") + "<|im_end|>" if turn == 0 else "4<|im_end|>"  # noqa: E731
    config = rollout_config(prompt_length=64, response_length=200, default_agent_loop="tool_agent",
                            function_tool_path="hybridrl.rollout.tools.builtin.calculator")
    manager, _ = make_manager(chatml_tokenizer, respond, config)
    batch = manager.generate_sequences(prompts_batch(["a"]))
    manager.close()
    (turns,) = batch_rollout_turns(chatml_tokenizer, batch)
    assert [(t["role"], t["trained"]) for t in turns] == [("assistant", True), ("glue", False), ("tool", False),
                                                          ("glue", False), ("assistant", True)]
    assert [t["text"] for t in turns] == [tool_call("calculator", expression="2+2") + "<|im_end|>", "\n",
                                          "<|im_start|>user\n<tool_response>4</tool_response><|im_end|>\n",
                                          "<|im_start|>assistant\n", "4<|im_end|>"]
    assert sum(t["num_tokens"] for t in turns) == int(batch["attention_mask"][0, 64:].sum())


def test_an_overlong_prompt_keeps_its_end_and_is_counted(chatml_tokenizer, caplog):
    manager, engine = make_manager(chatml_tokenizer, lambda text, turn: "z<|im_end|>",
                                   rollout_config(prompt_length=10, response_length=4))
    batch = manager.generate_sequences(prompts_batch(["a long question that does not fit"] * 2))
    manager.close()
    rendered = chatml_tokenizer.apply_chat_template([{"role": "user", "content": "a long question that does not fit"}],
                                                    add_generation_prompt=True, tokenize=False)
    tail = chatml_tokenizer(rendered, add_special_tokens=False)["input_ids"][-10:]
    assert engine.requests[0].prompt_ids == tail and batch["prompts"][0].tolist() == tail
    assert batch.meta["metrics"]["agent_loop/num_prompts_truncated"] == 2.0


def test_agent_settings_are_checked_when_the_manager_is_built(chatml_tokenizer):
    from hybridrl.config import ConfigError

    config = rollout_config(max_parallel_calls=0, tool_call_timeout=0, max_assistant_turns=None)
    with pytest.raises(ConfigError, match=r"multi_turn.max_parallel_calls=0 must be a count >= 1; .*"
                                          r"multi_turn.tool_call_timeout=0 must be seconds > 0$"):
        AgentLoopManager(ScriptedEngine(chatml_tokenizer, None), chatml_tokenizer, config)
    with pytest.raises(ValueError, match="multi_turn.format='qwen3_coder' is not a known tool-call format"):
        AgentLoopManager(ScriptedEngine(chatml_tokenizer, None), chatml_tokenizer, rollout_config(format="qwen3_coder"))


def test_log_probs_are_all_or_none():
    from hybridrl.rollout.agent import AgentLoopOutput
    from hybridrl.rollout.agent.postprocess import outputs_to_batch

    with_lp = AgentLoopOutput([1], [5, 6], [1, 0], [-0.5, 0.0])
    without = AgentLoopOutput([1], [5], [1], None)
    assert "rollout_log_probs" not in outputs_to_batch([without], 2, 3, 0)
    assert outputs_to_batch([with_lp], 2, 3, 0)["rollout_log_probs"].tolist() == [[-0.5, 0.0, 0.0]]
    with pytest.raises(ValueError, match=r"trajectories \[1\] have no response_logprobs while others do"):
        outputs_to_batch([with_lp, without], 2, 3, 0)
