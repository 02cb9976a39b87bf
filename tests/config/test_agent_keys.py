"""verl's agent-loop / multi-turn keys: spellings and defaults, removed and legacy keys."""

from __future__ import annotations

import logging

import pytest

from hybridrl.config import ConfigError, load_config

MT = "actor_rollout_ref.rollout.multi_turn"


def test_agent_keys_exist_with_verls_defaults():
    cfg = load_config()
    multi_turn, agent = cfg.actor_rollout_ref.rollout.multi_turn, cfg.actor_rollout_ref.rollout.agent
    assert (multi_turn.enable, multi_turn.max_assistant_turns, multi_turn.max_user_turns, multi_turn.tool_config_path,
            multi_turn.function_tool_path, multi_turn.max_parallel_calls, multi_turn.max_tool_response_length,
            multi_turn.tool_response_truncate_side, multi_turn.format) == (
        False, None, None, None, None, 1, 256, "middle", "hermes")
    assert (agent.num_workers, agent.default_agent_loop, agent.agent_loop_config_path) == (8, "single_turn_agent", None)
    assert cfg.data.return_raw_chat is True and cfg.data.apply_chat_template_kwargs == {}
    assert cfg.actor_rollout_ref.model.custom_chat_template is None
    assert multi_turn.tool_call_timeout == 60.0  # hybridrl's key


def test_data_tool_paths_follow_the_multi_turn_keys():
    cfg = load_config([f"{MT}.tool_config_path=/t.yaml", f"{MT}.function_tool_path=/f.py", f"{MT}.max_user_turns=3",
                       "+data.apply_chat_template_kwargs.enable_thinking=false"])
    assert (cfg.data.tool_config_path, cfg.data.function_tool_path) == ("/t.yaml", "/f.py")
    assert cfg.actor_rollout_ref.rollout.multi_turn.max_user_turns == 3
    assert cfg.data.apply_chat_template_kwargs == {"enable_thinking": False}


def test_interaction_config_is_accepted_with_one_notice_that_verl_removed_it(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl.config"):
        cfg = load_config([f"{MT}.interaction_config_path=/i.yaml"])
    assert cfg.actor_rollout_ref.rollout.multi_turn.interaction_config_path == "/i.yaml"
    lines = {record.getMessage() for record in caplog.records if "interaction_config_path" in record.getMessage()}
    assert len(lines) == 1
    assert "verl 0.8 removed interactions" in lines.pop()


@pytest.mark.parametrize(("override", "phrase"), [
    (f"{MT}.tokenization_sanity_check_mode=ignore_strippable", "never re-tokenizes a conversation"),
    (f"{MT}.use_inference_chat_template=true", "trains on exactly the tokens the model saw"),
    (f"{MT}.num_repeat_rollouts=4", "set actor_rollout_ref.rollout.n"),
])
def test_legacy_keys_get_one_warning_line(caplog, override, phrase):
    with caplog.at_level(logging.WARNING, logger="hybridrl.config"):
        load_config([override])
    # caplog may see a record twice (through the hybridrl logger and the root): count distinct lines
    (message,) = {r.getMessage() for r in caplog.records if r.name == "hybridrl.config"}
    assert override.split("=")[0] in message and phrase in message and "\n" not in message


def test_defaults_of_legacy_keys_are_silent(caplog):
    with caplog.at_level(logging.WARNING, logger="hybridrl.config"):
        load_config([f"{MT}.tokenization_sanity_check_mode=strict"])
    assert [r for r in caplog.records if r.name == "hybridrl.config"] == []


def test_training_with_agent_loops_is_accepted():
    cfg = load_config([f"{MT}.enable=true", "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                       f"{MT}.function_tool_path=hybridrl.rollout.tools.builtin.calculator"])
    assert cfg.actor_rollout_ref.rollout.multi_turn.enable and cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "tool_agent"


def test_truncate_side_is_checked():
    from hybridrl.config.validate import validate_config

    with pytest.raises(ConfigError, match="tool_response_truncate_side='top' is not one of left|right|middle"):
        validate_config(load_config([f"{MT}.tool_response_truncate_side=top"]))


def test_trace_backend_mlflow_is_accepted_and_weave_refused_naming_mlflow():
    assert load_config(["actor_rollout_ref.rollout.trace.backend=mlflow"]).actor_rollout_ref.rollout.trace.backend == "mlflow"
    with pytest.raises(ConfigError) as err:
        load_config(["actor_rollout_ref.rollout.trace.backend=weave"])
    assert "actor_rollout_ref.rollout.trace.backend='weave'" in str(err.value) and "trace.backend=mlflow" in str(err.value)
