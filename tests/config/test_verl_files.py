"""hybridrl's copies of verl's config files: made from the schema, and composing to exactly its defaults."""

from __future__ import annotations

import os

import pytest

from hybridrl.config import ConfigError, config_to_dict, load_config, parse_cli_args
from hybridrl.config.compose import VERL_CONFIG_DIR, compose_defaults
from hybridrl.config.index import default_tree
from hybridrl.config.verl_files import render_files


def test_checked_in_files_match_the_schema():
    files = render_files()
    on_disk = {os.path.relpath(os.path.join(root, name), VERL_CONFIG_DIR)
               for root, _, names in os.walk(VERL_CONFIG_DIR) for name in names if name.endswith(".yaml")}
    assert on_disk == set(files), "regenerate: python -m hybridrl.config.verl_files"
    for rel, text in files.items():
        with open(os.path.join(VERL_CONFIG_DIR, rel), encoding="utf-8") as handle:
            assert handle.read() == text, f"{rel} is stale; regenerate: python -m hybridrl.config.verl_files"


def test_ppo_trainer_composes_to_the_schema_defaults():
    assert compose_defaults([]) == default_tree()


def test_ppo_trainer_by_name_loads_the_defaults():
    config_file, overrides = parse_cli_args(["--config-path=config", "--config-name=ppo_trainer", "data.train_batch_size=8"])
    assert config_file == os.path.join(VERL_CONFIG_DIR, "ppo_trainer.yaml")
    expected = config_to_dict(load_config(["data.train_batch_size=8"]))
    assert config_to_dict(load_config(overrides, config_file)) == expected


@pytest.mark.parametrize("argv", [
    ["--config-path=config", "--config-name=ppo_megatron_trainer.yaml"],
    ["--config-path", "./config", "--config-name", "ppo_megatron_trainer"],
    ["--config-path=/opt/verl/verl/trainer/config", "--config-name=ppo_megatron_trainer"],  # a verl checkout's own
    ["model_engine=megatron"],
    ["actor@actor_rollout_ref.actor=megatron_actor"],
])
def test_megatron_configs_compose_and_are_refused_by_name(argv):
    config_file, overrides = parse_cli_args(argv)
    with pytest.raises(ConfigError) as err:
        load_config(overrides, config_file)
    assert "actor_rollout_ref.actor.strategy='megatron': only the FSDP engine (fsdp, fsdp2) is implemented" in str(err.value)
    assert "unknown config key" not in str(err.value)


def test_model_engine_choice_sets_every_role():
    with pytest.raises(ConfigError) as err:
        load_config(["model_engine=veomni"])
    for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model"):
        assert f"{role}.strategy='veomni'" in str(err.value)
    assert "model_engine='veomni'" in str(err.value)


def test_unknown_group_option_lists_the_options():
    with pytest.raises(ConfigError, match=r"Could not find 'model_engine/nope' ; options in 'model_engine': dp megatron mlite torchtitan veomni"):
        load_config(["model_engine=nope"])


def test_other_config_path_is_read_as_given(tmp_path):
    assert parse_cli_args(["--config-path", str(tmp_path), "--config-name", "ppo_trainer"])[0] == str(tmp_path / "ppo_trainer.yaml")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "mine.yaml").write_text("data:\n  train_batch_size: 4\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:  # a relative folder that exists here wins over verl's `config` meaning
        config_file, _ = parse_cli_args(["--config-path=config", "--config-name=mine"])
        assert load_config(config_file=config_file).data.train_batch_size == 4
    finally:
        os.chdir(cwd)
