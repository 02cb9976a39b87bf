"""Unknown keys (did-you-mean), wrong types and several problems reported together."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config


def test_did_you_mean_for_a_typo():
    with pytest.raises(ConfigError) as err:
        load_config(["actor_rollout_ref.actor.ppo_mini_bach_size=2"])
    assert str(err.value) == (
        "unknown config key 'actor_rollout_ref.actor.ppo_mini_bach_size'; "
        "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?"
    )


def test_did_you_mean_for_a_key_at_the_wrong_depth():
    with pytest.raises(ConfigError, match=r"did you mean 'actor_rollout_ref.actor.optim.lr' or 'critic.optim.lr'\?"):
        load_config(["actor_rollout_ref.actor.lr=1e-6"])


def test_unknown_key_without_close_match_points_at_docs():
    with pytest.raises(ConfigError, match="unknown config key 'zzz'; run `python -m hybridrl.config.cli --docs`"):
        load_config(["zzz=1"])


def test_a_key_verl_lacks_too_says_so_and_what_sets_the_dtype():
    """verl's January CISPO example sets model.torch_dtype, which verl's Hydra refuses too (not in struct)."""
    with pytest.raises(ConfigError) as err:
        load_config(["actor_rollout_ref.model.torch_dtype=bfloat16"])
    message = str(err.value)
    assert message.startswith("unknown config key 'actor_rollout_ref.model.torch_dtype': verl's config has no such key")
    assert "actor_rollout_ref.actor.fsdp_config.dtype" in message and "remove the key" in message


def test_unknown_key_also_caught_with_plus():
    with pytest.raises(ConfigError, match="unknown config key 'trainer.n_gpus'; did you mean 'trainer.n_gpus_per_node'"):
        load_config(["+trainer.n_gpus=1"])


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.train_batch_size=abc", "data.train_batch_size='abc' has the wrong type: expected int"),
        ("data.train_batch_size=1.5", "data.train_batch_size=1.5 has the wrong type: expected int"),
        ("data.shuffle=maybe", "data.shuffle='maybe' has the wrong type: expected bool"),
        ("trainer.n_gpus_per_node=[1]", "trainer.n_gpus_per_node=[1] has the wrong type: expected int or null"),
        ("data.max_prompt_length=null", "data.max_prompt_length=None has the wrong type: expected int"),
        ("actor_rollout_ref.actor.device_ids=[a]", "expected list of int or null"),
    ],
)
def test_type_errors_name_key_value_and_type(override, expected):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert expected in str(err.value)


def test_all_problems_listed_together():
    with pytest.raises(ConfigError) as err:
        load_config(["data.train_batch_size=abc", "data.shuffle=maybe"])
    message = str(err.value)
    assert message.startswith("2 config problems:") and "data.train_batch_size" in message and "data.shuffle" in message
