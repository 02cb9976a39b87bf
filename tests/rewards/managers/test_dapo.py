"""verl's DAPO reward manager: the overlong penalty by hand, both config spellings, its checks and metrics."""

from __future__ import annotations

import pytest

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.managers import build_reward_manager

from tests.rewards.managers.helpers import config, rows

KWARGS = ("reward_manager.name=dapo", "+reward_model.reward_kwargs.max_resp_len=100",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.len=20",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
          "+reward_model.reward_kwargs.overlong_buffer_cfg.log=true")


def test_overlong_penalty_by_hand():
    manager = build_reward_manager(config(*KWARGS), tokenizer=None)
    # L_max 100, L_cache 20: free up to 80 tokens, then -(len - 80) / 20, reaching -1 at 100
    scored = manager(None, rows(["#### 7"] * 4, ["7", "7", "8", "7"], lengths=[50, 80, 90, 100]))
    assert scored.scores == pytest.approx([1.0, 1.0, -0.5, 0.0])
    assert scored.extra["overlong_reward"] == pytest.approx([0.0, 0.0, -0.5, -1.0])
    assert scored.extra["overlong"] == [False, False, True, True]
    assert scored.extra["acc"] == [1.0, 1.0, 0.0, 1.0]  # a float reward's score before the penalty
    assert scored.metrics == pytest.approx({"reward/overlong_reward/mean": -0.375, "reward/overlong/mean": 0.5})


def test_recipe_spelling_uses_data_max_response_length():
    cfg = config("reward_manager.name=dapo", "data.max_response_length=64", "reward_model.overlong_buffer.enable=true",
                 "reward_model.overlong_buffer.len=16", "reward_model.overlong_buffer.penalty_factor=0.5")
    scored = build_reward_manager(cfg, tokenizer=None)(None, rows(["#### 1"], ["1"], lengths=[64]))
    assert scored.scores == pytest.approx([0.5]) and "overlong" not in scored.extra  # log is off


def test_dict_rewards_keep_their_keys_and_no_penalty_without_the_buffer():
    scored = build_reward_manager(config("reward_manager.name=dapo"), None)(
        None, rows(["Answer: 3", "Answer: 4"], ["3", "3"], sources=["math_dapo", "aime24"]))
    assert scored.scores == [1.0, -1.0] and scored.extra["acc"] == [True, False] and scored.extra["pred"] == ["3", "4"]
    assert scored.metrics == {}


def test_a_trailing_eos_text_is_stripped_before_scoring():
    class Tokenizer:
        eos_token = "</s>"

    scored = build_reward_manager(config("reward_manager.name=dapo"), Tokenizer())(None, rows(["#### 5</s>"], ["5"]))
    assert scored.scores == [1.0]


@pytest.mark.parametrize("overrides, message", [
    (("+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=8"), "needs the maximum response length"),
    (("+reward_model.reward_kwargs.max_resp_len=100", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true"),
     r"len=0 must be positive"),
    (("+reward_model.reward_kwargs.max_resp_len=10", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=20"), r"max_resp_len \(10\) must be at least"),
    (("+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
      "+reward_model.reward_kwargs.overlong_buffer_cfg.size=20"), r"unknown keys \['size'\]"),
    (("+reward_model.reward_kwargs.max_len=1",), r"\['max_len'\], which the dapo reward manager does not take"),
    (("reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=8",
      "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true"), "two spellings"),
])
def test_misconfigurations_name_the_key_and_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_reward_manager(config("reward_manager.name=dapo", *overrides), None)


def test_the_recipe_buffer_needs_the_dapo_manager():
    with pytest.raises(ConfigError, match="only the dapo reward manager applies.*reward_manager.name=dapo"):
        build_reward_manager(config("reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=8"),
                             None)
