"""config/ranges.py: a range for every numeric key, defaults inside them, messages that name key, value, rule, fix."""

from __future__ import annotations

import math

import pytest

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.config.index import default_tree, get_in, schema_index, type_arms
from hybridrl.config.ranges import ANY_FLOAT, LIST_RANGES, RANGES, Range, range_problems

VALID = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4"]


def numeric_keys() -> set[str]:
    return {path for path, spec in schema_index().items()
            if spec.section is None and any(arm in (int, float) for arm in type_arms(spec.hint))}


def test_every_numeric_schema_key_has_a_range_and_nothing_else_does():
    keys = numeric_keys()
    assert sorted(keys - set(RANGES)) == [], "give these keys a Range (or ANY_FLOAT / ANY_INT) in config/ranges.py"
    assert sorted(set(RANGES) - keys) == [], "config/ranges.py names keys that are not numeric schema keys"
    lists = {path for path, spec in schema_index().items() if str(spec.hint).startswith("list[float]")}
    assert set(LIST_RANGES) == lists


def test_every_default_is_inside_its_range():
    tree = default_tree()
    for key, rule in RANGES.items():
        value = get_in(tree, key)
        if value is None or isinstance(value, str):  # null, or a ${...} default (the key it follows is checked)
            continue
        assert rule.allows(value), (key, value, rule.rule())
    assert range_problems(load_config([])) == []


def test_range_semantics():
    unit = Range(low=0, high=1, high_open=True)
    assert unit.allows(0) and unit.allows(0.5) and not unit.allows(1) and not unit.allows(-0.1)
    assert not unit.allows(math.nan) and not unit.allows(math.inf)
    clip = Range(low=0, low_open=True, infinite_ok=True)
    assert clip.allows(math.inf) and not clip.allows(-math.inf) and not clip.allows(0) and not clip.allows(math.nan)
    assert Range(low=1, also=(-1,)).allows(-1) and not Range(low=1, also=(-1,)).allows(0)
    assert ANY_FLOAT.allows(-1e300) and not ANY_FLOAT.allows(math.nan) and not ANY_FLOAT.allows(math.inf)
    assert Range(low=0, low_open=True, infinite_ok=True).rule() == "> 0 (or inf)"
    assert Range(low=1, high=2**31 - 1, also=(-1,)).rule() == "-1 or >= 1"
    assert Range(low=0, high=1, low_open=True).rule() == "in (0, 1]"


@pytest.mark.parametrize("override,expected", [
    ("actor_rollout_ref.actor.grad_clip=-1",
     "actor_rollout_ref.actor.grad_clip=-1.0 is out of range: it must be > 0 (or inf): the gradient-norm bound"),
    ("algorithm.gamma=1.5", "algorithm.gamma=1.5 is out of range: it must be in [0, 1]: a discount factor; "
                            "set algorithm.gamma=1.0 (the default)"),
    ("trainer.seed=-1", "trainer.seed=-1 is out of range: it must be in [0, 4294967295]"),
    ("data.train_batch_size=4294967296", "data.train_batch_size=4294967296 is out of range: it must be <= 2^31-1"),
    ("actor_rollout_ref.actor.optim.betas=[0.9,1.5]", "actor_rollout_ref.actor.optim.betas=[0.9, 1.5]: every element "
                                                      "must be in [0, 1)"),
])
def test_messages_name_key_value_rule_and_fix(override, expected):
    with pytest.raises(ConfigError) as caught:
        validate_config(load_config(VALID + [override]))
    assert expected in str(caught.value)


def test_a_value_that_follows_another_key_is_reported_once():
    """critic.ppo_epochs follows actor.ppo_epochs (`${...}`): one message, for the key the user set."""
    with pytest.raises(ConfigError) as caught:
        validate_config(load_config(VALID + ["actor_rollout_ref.actor.ppo_epochs=0"]))
    assert "actor_rollout_ref.actor.ppo_epochs=0" in str(caught.value) and "critic.ppo_epochs" not in str(caught.value)


def test_a_key_with_its_own_rule_keeps_that_message_only():
    with pytest.raises(ConfigError) as caught:
        validate_config(load_config(VALID + ["actor_rollout_ref.rollout.top_p=0"]))
    assert str(caught.value).count("actor_rollout_ref.rollout.top_p") == 1


def test_gen_batch_size_rules():
    validate_config(load_config(VALID + ["data.gen_batch_size=1024"]))  # = train_batch_size: the same as null
    with pytest.raises(ConfigError, match=r"data.gen_batch_size \(2048\) > data.train_batch_size \(1024\) only has a "
                                          r"meaning with DAPO dynamic sampling"):
        validate_config(load_config(VALID + ["data.gen_batch_size=2048"]))
    dapo = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    for size in (2048, 256):  # dynamic sampling takes as many rounds of gen_batch_size prompts as a step needs
        validate_config(load_config(VALID + dapo + [f"data.gen_batch_size={size}"]))
