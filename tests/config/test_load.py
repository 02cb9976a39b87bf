"""YAML files, `${...}` interpolation, precedence (defaults < file < command line) and argv parsing."""

from __future__ import annotations

import os
import textwrap

import pytest

from hybridrl.config import ConfigError, HybridRLConfig, config_to_dict, config_to_yaml, load_config, parse_cli_args


def write(tmp_path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_defaults_equal_the_dataclass_defaults():
    assert config_to_dict(load_config()) == config_to_dict(HybridRLConfig())


def test_interpolated_defaults_follow_their_source():
    cfg = load_config(["data.max_prompt_length=256", "data.max_response_length=128", "trainer.project_name=p",
                       "trainer.experiment_name=e", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                       "actor_rollout_ref.rollout.n=4"])  # fmt: skip
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.prompt_length, rollout.response_length) == (256, 128)
    assert cfg.trainer.default_local_dir == "checkpoints/p/e"
    assert cfg.critic.ppo_mini_batch_size == 32 and cfg.critic.rollout_n == 4


def test_explicit_value_beats_interpolation_regardless_of_order():
    cfg = load_config(["actor_rollout_ref.rollout.prompt_length=100", "data.max_prompt_length=256"])
    assert cfg.actor_rollout_ref.rollout.prompt_length == 100


def test_relative_interpolation_and_oc_select():
    cfg = load_config(["actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]",
                       "actor_rollout_ref.model.use_remove_padding=false"])  # fmt: skip
    assert cfg.actor_rollout_ref.actor.checkpoint.load_contents == ["model", "hf_model"]  # ${.save_contents}
    assert cfg.actor_rollout_ref.actor.use_remove_padding is False  # ${oc.select:...model.use_remove_padding,false}


def test_yaml_file_then_overrides(tmp_path):
    path = write(
        tmp_path,
        """
        data:
          train_batch_size: 64
          max_prompt_length: 128
        actor_rollout_ref:
          actor:
            optim:
              lr: 1e-5          # YAML 1.1 reads this as a string; the schema makes it a float
          model:
            override_config:
              attn_implementation: eager
        trainer:
          experiment_name: ${oc.env:HYBRIDRL_TEST_EXP,fallback}
          logger: console
        """,
    )
    cfg = load_config(["data.train_batch_size=32"], config_file=path)
    assert cfg.data.train_batch_size == 32  # command line beats the file
    assert cfg.actor_rollout_ref.rollout.prompt_length == 128  # file value feeds the interpolation
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-5)
    assert cfg.actor_rollout_ref.model.override_config == {"attn_implementation": "eager"}
    assert cfg.trainer.experiment_name == "fallback" and cfg.trainer.logger == ["console"]
    os.environ["HYBRIDRL_TEST_EXP"] = "from_env"
    try:
        assert load_config(config_file=path).trainer.default_local_dir == "checkpoints/verl_examples/from_env"
    finally:
        del os.environ["HYBRIDRL_TEST_EXP"]


def test_yaml_merges_open_dicts_and_skips_verl_targets(tmp_path):
    path = write(tmp_path, """
        actor_rollout_ref:
          rollout:
            _target_: verl.workers.config.RolloutConfig
            engine_kwargs: {vllm: {swap_space: 4}}
        algorithm:
          filter_groups: null
        """)  # fmt: skip
    cfg = load_config(config_file=path)
    assert cfg.actor_rollout_ref.rollout.engine_kwargs == {"vllm": {"swap_space": 4}, "sglang": {}, "trtllm": {}}
    assert cfg.algorithm.filter_groups.enable is False


def test_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot compose config file .* Could not load 'nope'"):
        load_config(config_file=write(tmp_path, "defaults:\n  - nope\n  - _self_\n"))
    with pytest.raises(ConfigError, match="unknown config key 'data.train_batch'"):
        load_config(config_file=write(tmp_path, "data:\n  train_batch: 3\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(config_file=str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="key 'trainer.experiment_name': Interpolation key 'data.nope' not found"):
        load_config(["trainer.experiment_name=${data.nope}"])


def test_yaml_round_trip(tmp_path):
    cfg = load_config(["actor_rollout_ref.actor.optim.lr=3e-6", "data.train_files=[a,b]", "trainer.device=cpu"])
    path = write(tmp_path, config_to_yaml(cfg))
    assert load_config(config_file=path) == cfg


def test_parse_cli_args_forms(tmp_path):
    assert parse_cli_args(["--config", "x.yaml", "a.b=1"]) == ("x.yaml", ["a.b=1"])
    assert parse_cli_args(["--config=x.yaml"]) == ("x.yaml", [])
    assert parse_cli_args(["--config-path", "cfg", "--config-name", "grpo", "+a=1"]) == (os.path.join("cfg", "grpo.yaml"), ["+a=1"])
    assert parse_cli_args(["--config-path=cfg", "--config-name=grpo.yaml"]) == (os.path.join("cfg", "grpo.yaml"), [])
    assert parse_cli_args(["a=1", "~b"]) == (None, ["a=1", "~b"])
    with pytest.raises(ConfigError, match="unknown option '--verbose'"):
        parse_cli_args(["--verbose"])
    with pytest.raises(ConfigError, match="--config-path needs --config-name"):
        parse_cli_args(["--config-path", "cfg"])
