"""Each Hydra override form, parsed and applied through load_config."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config
from hybridrl.config.overrides import parse_override, parse_overrides


def parse_value(text: str):
    return parse_override(f"a.b={text}").value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        ("-3", -3),
        ("1e-6", 1e-6),
        ("0.5", 0.5),
        ("null", None),
        ("True", True),
        ("false", False),
        ("'error'", "error"),
        ('"1"', "1"),
        ('["console","wandb"]', ["console", "wandb"]),
        ("['a.parquet','b.parquet']", ["a.parquet", "b.parquet"]),
        ("[1, 2]", [1, 2]),
        ("[]", []),
        ("{x:1, y:[a,b], z:{q:null}}", {"x": 1, "y": ["a", "b"], "z": {"q": None}}),
        ("${data.max_prompt_length}", "${data.max_prompt_length}"),
        ("[${a.b},2]", ["${a.b}", 2]),
        ("http://host:8000", "http://host:8000"),
        ("1_000", 1000),
        ("$HOME/data/x.parquet", "$HOME/data/x.parquet"),
        ("", ""),
    ],
)
def test_parse_value(text, expected):
    value = parse_value(text)
    assert value == expected and type(value) is type(expected)


def test_comma_without_brackets_is_refused_with_the_list_spelling():
    with pytest.raises(ConfigError, match=r"a\.b='\[1,2\]'"):
        parse_value("1,2")


def test_parse_override_prefixes():
    assert (parse_override("+a.b=1").op, parse_override("++a.b=1").op) == ("add", "force")
    assert parse_override("~a.b").op == "delete" and parse_override("~a.b").has_value is False
    assert parse_override("a.b='x=y'").value == "x=y"


@pytest.mark.parametrize("text", ["a.b", "a.b=x=y", "a.b=~/models/m", "a.b=a#b"])
def test_hydra_grammar_errors_name_the_override_and_the_fix(text):
    with pytest.raises(ConfigError) as err:
        parse_override(text)
    assert f"cannot parse the override {text!r}" in str(err.value) and "key='...'" in str(err.value)


def test_values_with_spaces_and_group_choices_split_off():
    parsed = parse_overrides(["a.b=uv run --frozen", "model_engine=megatron", "actor@actor_rollout_ref.actor=x",
                              "data.x=1"], frozenset({"model_engine"}))
    assert [o.value for o in parsed.keys] == ["uv run --frozen", 1]
    assert parsed.groups == ["model_engine=megatron", "actor@actor_rollout_ref.actor=x"]


def test_plain_set_with_typed_values():
    cfg = load_config(
        ["data.train_batch_size=64", "actor_rollout_ref.actor.optim.lr=1e-5", "data.filter_overlong_prompts=True",
         "data.truncation='left'", "trainer.total_training_steps=null"]
    )  # fmt: skip
    assert cfg.data.train_batch_size == 64
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-5)
    assert cfg.data.filter_overlong_prompts is True and cfg.data.truncation == "left"
    assert cfg.trainer.total_training_steps is None


def test_lists_quoted_and_bare():
    cfg = load_config(["data.train_files=['a.parquet','b.parquet']", "trainer.logger=[console]"])
    assert cfg.data.train_files == ["a.parquet", "b.parquet"] and cfg.trainer.logger == ["console"]


def test_int_given_for_float_and_float_string_for_int():
    cfg = load_config(["actor_rollout_ref.rollout.temperature=1", "data.max_response_length=1e3"])
    assert cfg.actor_rollout_ref.rollout.temperature == 1.0 and isinstance(cfg.actor_rollout_ref.rollout.temperature, float)
    assert cfg.data.max_response_length == 1000 and isinstance(cfg.data.max_response_length, int)


def test_plus_adds_under_open_dicts_and_nested_dict_values():
    cfg = load_config(
        ["+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_cascade_attn=True",
         "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
         "+actor_rollout_ref.actor.optim.override_optimizer_config.eps=1e-8",
         "data.apply_chat_template_kwargs={enable_thinking:false}",
         "+ray_kwargs.ray_init.address=auto"]
    )  # fmt: skip
    arr = cfg.actor_rollout_ref
    assert arr.rollout.engine_kwargs == {"vllm": {"disable_cascade_attn": True}, "sglang": {}, "trtllm": {}}
    assert arr.model.override_config == {"attn_implementation": "sdpa"}
    assert arr.actor.optim.override_optimizer_config == {"eps": 1e-8}
    assert cfg.data.apply_chat_template_kwargs == {"enable_thinking": False}
    assert cfg.ray_kwargs.ray_init == {"num_cpus": None, "address": "auto"}


def test_plus_on_an_existing_schema_key_sets_it():
    # Hydra refuses this, but scripts written for one verl version add with `+` keys another version has
    assert load_config(["+data.train_batch_size=4"]).data.train_batch_size == 4


def test_plus_accepted_for_keys_verl_yaml_lacks():
    cfg = load_config(["+data.gen_batch_size=32", "+reward_model.reward_kwargs.max_resp_len=64"])
    assert cfg.data.gen_batch_size == 32 and cfg.reward_model.reward_kwargs == {"max_resp_len": 64}


def test_double_plus_adds_or_overrides():
    cfg = load_config(["++data.train_batch_size=4", "++actor_rollout_ref.model.override_config.x=1"])
    assert cfg.data.train_batch_size == 4 and cfg.actor_rollout_ref.model.override_config == {"x": 1}


def test_tilde_deletes_open_dict_keys_and_resets_schema_keys():
    cfg = load_config(
        ["+ray_kwargs.ray_init.address=auto", "~ray_kwargs.ray_init.num_cpus", "data.max_prompt_length=64",
         "actor_rollout_ref.rollout.prompt_length=100", "~actor_rollout_ref.rollout.prompt_length"]
    )  # fmt: skip
    assert cfg.ray_kwargs.ray_init == {"address": "auto"}
    # reset to its default, which follows data.max_prompt_length again
    assert cfg.actor_rollout_ref.rollout.prompt_length == 64
    with pytest.raises(ConfigError, match="cannot delete 'ray_kwargs.ray_init.nope'"):
        load_config(["~ray_kwargs.ray_init.nope"])


def test_later_override_wins():
    assert load_config(["data.train_batch_size=4", "data.train_batch_size=8"]).data.train_batch_size == 8


def test_group_given_a_scalar_is_refused():
    with pytest.raises(ConfigError, match="data is a group of keys"):
        load_config(["data=3"])
