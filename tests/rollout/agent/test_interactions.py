"""The tool agent loop with a simulated user (multi_turn.interaction_config_path): the user's replies are
observation tokens (mask 0, log-prob 0), its scores reach the reward's extra_info as turn_scores, turn
limits hold, and every trajectory's interaction is started and finalized, also when something fails."""

from __future__ import annotations

import pytest

from hybridrl.rollout.agent import AgentLoopError, AgentLoopManager
from hybridrl.rollout.interactions.gsm8k import INCORRECT
from hybridrl.utils.batch import Batch
from tests.rollout.agent import interaction_fixtures
from tests.rollout.agent.helpers import ScriptedEngine, fake_log_prob, rollout_config

QUESTION = [{"role": "user", "content": "48 clips in April, half as many in May. How many?"}]
WRONG, RIGHT = "#### 48<|im_end|>", "#### 72<|im_end|>"
GSM8K_YAML = ("interaction:\n  - name: gsm8k\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
              "    config: {}\n")
RECORDING_YAML = ("interaction:\n  - name: recorder\n    class_name: tests.rollout.agent.interaction_fixtures.RecordingUser\n"
                  "    config: {fail_on: FAIL_ON}\n")


def run(tokenizer, tmp_path, respond, yaml_text=GSM8K_YAML, kwargs=None, rows=1, **multi_turn):
    path = tmp_path / "interaction_config.yaml"
    path.write_text(yaml_text)
    engine = ScriptedEngine(tokenizer, respond)
    config = rollout_config(default_agent_loop="tool_agent", interaction_config_path=str(path), **multi_turn)
    manager = AgentLoopManager(engine, tokenizer, config, model_type="qwen2")
    kwargs = kwargs if kwargs is not None else {"name": "gsm8k", "query": QUESTION[0]["content"], "ground_truth": "72"}
    prompts = Batch(non_tensors={"raw_prompt": [QUESTION] * rows, "data_source": ["openai/gsm8k"] * rows,
                                 "extra_info": [{"index": i, "interaction_kwargs": kwargs} for i in range(rows)]})
    try:
        return manager.generate_sequences(prompts), engine
    finally:
        manager.close()


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def response_of(batch: Batch, row: int = 0):
    width = batch["prompts"].shape[1]
    length = int(batch["attention_mask"][row, width:].sum())
    return (batch["responses"][row, :length].tolist(), batch["response_mask"][row, :length].tolist(),
            batch["rollout_log_probs"][row, :length].tolist())


def test_the_users_reply_is_observation_tokens_and_its_scores_reach_the_reward(chatml_tokenizer, tmp_path):
    batch, engine = run(chatml_tokenizer, tmp_path, lambda text, turn: WRONG if turn == 0 else RIGHT)
    enc = lambda text: encode(chatml_tokenizer, text)  # noqa: E731
    inserted = enc("\n") + enc(f"<|im_start|>user\n{INCORRECT}<|im_end|>\n") + enc("<|im_start|>assistant\n")
    ids, mask, log_probs = response_of(batch)
    # The reply that ends the sequence ("correct") is not appended: the row ends on the model's own tokens.
    assert ids == enc(WRONG) + inserted + enc(RIGHT)
    assert mask == [1] * len(enc(WRONG)) + [0] * len(inserted) + [1] * len(enc(RIGHT))
    assert log_probs == pytest.approx([fake_log_prob(i) for i in range(len(enc(WRONG)))] + [0.0] * len(inserted)
                                      + [fake_log_prob(i) for i in range(len(enc(RIGHT)))])
    assert list(batch["__num_turns__"]) == [5]  # prompt + 2 assistant + 2 user replies, as verl counts
    assert batch["extra_info"][0]["turn_scores"] == [0.0, 1.0]
    assert batch["extra_info"][0]["interaction_metrics"] == [{}, {}]
    assert list(batch["turn_scores"]) == [[0.0, 1.0]]
    metrics = batch.meta["metrics"]
    assert metrics["agent_loop/num_interaction_turns/mean"] == 2.0
    assert metrics["agent_loop/interaction_errors"] == 0.0
    assert len(engine.requests) == 2


@pytest.mark.parametrize(("limits", "assistant_turns"), [({"max_user_turns": 1}, 2), ({"max_assistant_turns": 3}, 3)])
def test_turn_limits_end_a_conversation_the_user_would_continue(chatml_tokenizer, tmp_path, limits, assistant_turns):
    batch, engine = run(chatml_tokenizer, tmp_path, lambda text, turn: WRONG, **limits)
    assert len(engine.requests) == assistant_turns
    assert batch["extra_info"][0]["turn_scores"] == [0.0] * (assistant_turns - 1)
    assert list(batch["__num_turns__"]) == [1 + 2 * assistant_turns - 1]


def test_each_trajectory_is_started_and_finalized_once(chatml_tokenizer, tmp_path):
    interaction_fixtures.EVENTS.clear()
    replies = lambda text, turn: "done<|im_end|>" if turn == 1 else "thinking<|im_end|>"  # noqa: E731
    batch, _ = run(chatml_tokenizer, tmp_path, replies, RECORDING_YAML.replace("FAIL_ON", "null"),
                   kwargs={"name": "recorder"}, rows=3)
    by_instance: dict[str, list[str]] = {}
    for event, instance in interaction_fixtures.EVENTS:
        by_instance.setdefault(instance, []).append(event)
    assert list(by_instance.values()) == [["start", "reply", "reply", "finalize"]] * 3
    assert [scores for scores in batch["turn_scores"]] == [[0.25, 0.25]] * 3


def test_a_failing_reply_ends_the_trajectory_is_counted_and_still_finalized(chatml_tokenizer, tmp_path, caplog):
    interaction_fixtures.EVENTS.clear()
    batch, engine = run(chatml_tokenizer, tmp_path, lambda text, turn: "thinking<|im_end|>",
                        RECORDING_YAML.replace("FAIL_ON", "2"), kwargs={"name": "recorder"})
    assert len(engine.requests) == 2  # the second reply raised: no third turn
    assert batch.meta["metrics"]["agent_loop/interaction_errors"] == 1.0
    assert batch.meta["metrics"]["agent_loop/num_interaction_turns/max"] == 1.0
    assert [event for event, _ in interaction_fixtures.EVENTS] == ["start", "reply", "finalize"]
    assert "ConnectionError: user model unreachable" in caplog.text and "agent_loop/interaction_errors" in caplog.text


def test_a_failing_engine_still_finalizes_the_interaction(chatml_tokenizer, tmp_path):
    interaction_fixtures.EVENTS.clear()

    def respond(text, turn):
        if turn == 1:
            raise RuntimeError("engine died")
        return "thinking<|im_end|>"

    with pytest.raises(AgentLoopError, match="engine died"):
        run(chatml_tokenizer, tmp_path, respond, RECORDING_YAML.replace("FAIL_ON", "null"), kwargs={"name": "recorder"})
    assert [event for event, _ in interaction_fixtures.EVENTS] == ["start", "reply", "finalize"]


@pytest.mark.parametrize(("kwargs", "named"), [({"name": "tutor"}, "names interaction 'tutor'"),
                                               ({}, "has no extra_info.interaction_kwargs.name")])
def test_a_row_naming_no_configured_interaction_fails_naming_both(chatml_tokenizer, tmp_path, kwargs, named):
    with pytest.raises(AgentLoopError) as error:
        run(chatml_tokenizer, tmp_path, lambda text, turn: WRONG, kwargs=kwargs)
    assert named in str(error.value) and "the configured interactions are ['gsm8k']" in str(error.value)
