"""Recipe-style YAML files composed with Hydra: defaults lists, `_self_` order, search paths, resolvers."""

from __future__ import annotations

import datetime
import os
import textwrap

import pytest

from hybridrl.config import ConfigError, load_config, parse_cli_args


def write(folder, name: str, text: str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


RECIPE = """
    hydra:
      searchpath:
        - file://verl/trainer/config
    defaults:
      - ppo_trainer
      - _self_
    data:
      train_batch_size: 16
      gen_batch_size: ${data.train_batch_size}
    actor_rollout_ref:
      actor:
        _target_: verl.workers.config.FSDPActorConfig
        clip_ratio_high: 0.28
      rollout:
        name: ???
    algorithm:
      adv_estimator: grpo
      filter_groups:
        _target_: verl.trainer.config.FilterGroupsConfig
        enable: False
        metric: acc
    reward_model:
      reward_manager: dapo
      reward_kwargs:
        overlong_buffer_cfg: {enable: true, len: 4096, penalty_factor: 1.0, log: false}
        max_resp_len: ${data.max_response_length}
    trainer:
      experiment_name: dapo-${now:%Y%m%d}
"""


def test_recipe_extending_ppo_trainer(tmp_path):
    config_file, overrides = parse_cli_args(["--config-path", str(tmp_path / "config"), "--config-name", "dapo_trainer",
                                             "data.max_response_length=2048"])
    write(tmp_path / "config", "dapo_trainer.yaml", RECIPE)
    cfg = load_config(overrides, config_file)
    assert cfg.data.train_batch_size == 16 and cfg.data.gen_batch_size == 16
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28 and cfg.actor_rollout_ref.actor.clip_ratio_low == 0.2
    assert cfg.actor_rollout_ref.rollout.name == "auto"  # `???` keeps hybridrl's default
    assert cfg.algorithm.filter_groups.metric == "acc" and cfg.algorithm.adv_estimator == "grpo"
    assert cfg.reward_manager.name == "dapo"  # the older spelling, copied onto the newer
    assert cfg.reward_model.reward_kwargs["max_resp_len"] == 2048  # resolved after the command line
    assert cfg.trainer.experiment_name == "dapo-" + datetime.datetime.now().strftime("%Y%m%d")
    assert cfg.trainer.default_local_dir == f"checkpoints/verl_examples/{cfg.trainer.experiment_name}"


def test_self_first_lets_the_defaults_list_win(tmp_path):
    write(tmp_path, "group/big.yaml", "train_batch_size: 64\n")
    path = write(tmp_path, "run.yaml", """
        defaults:
          - _self_
          - ppo_trainer
          - group@data: big
        data:
          train_batch_size: 8
          max_prompt_length: 100
        """)
    cfg = load_config(config_file=path)
    assert cfg.data.train_batch_size == 64  # group after _self_ overrides it
    assert cfg.data.max_prompt_length == 512  # ppo_trainer after _self_ resets it to the default


def test_search_path_folder_provides_groups(tmp_path):
    write(tmp_path / "extra", "algo/dr_grpo.yaml", "adv_estimator: grpo\nnorm_adv_by_std_in_grpo: false\n")
    path = write(tmp_path / "recipe", "run.yaml", f"""
        hydra:
          searchpath: [file://{tmp_path / "extra"}, pkg://verl.trainer.config]
        defaults:
          - ppo_trainer
          - algo@algorithm: dr_grpo
          - _self_
        """)
    cfg = load_config(config_file=path)
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False


def test_relative_searchpath_into_a_verl_checkout_uses_hybridrl_copies(tmp_path):
    # the recipe's search path reaches verl's own ppo_trainer (which asks for wandb and 8 GPUs); the copy wins
    write(tmp_path / "verl/trainer/config", "ppo_trainer.yaml", "trainer:\n  n_gpus_per_node: 8\n  logger: [console, wandb]\n")
    path = write(tmp_path / "recipe", "run.yaml", RECIPE)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        cfg = load_config(config_file=path)
    finally:
        os.chdir(cwd)
    assert cfg.trainer.n_gpus_per_node is None and cfg.trainer.logger == ["console", "file"]


def test_references_in_the_other_layout_resolve(tmp_path):
    path = write(tmp_path, "run.yaml", """
        reward:
          reward_manager:
            name: dapo
        trainer:
          experiment_name: rm-${reward.reward_manager.name}
        """)
    cfg = load_config(config_file=path)
    assert cfg.reward_manager.name == "dapo" and cfg.trainer.experiment_name == "rm-dapo"


def test_omegaconf_resolvers(monkeypatch):
    monkeypatch.setenv("HYBRIDRL_TEST_LR", "3e-6")
    cfg = load_config(["actor_rollout_ref.actor.optim.lr='${oc.decode:${oc.env:HYBRIDRL_TEST_LR}}'",  # nested: quoted, as Hydra wants
                       "actor_rollout_ref.actor.checkpoint.save_contents=${oc.create:'[model, hf_model]'}",
                       "trainer.project_name=${oc.env:HYBRIDRL_UNSET_VAR,fallback}"])
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-6)
    assert cfg.actor_rollout_ref.actor.checkpoint.load_contents == ["model", "hf_model"]
    assert cfg.trainer.project_name == "fallback"


@pytest.mark.parametrize(("override", "phrase"), [
    ("trainer.project_name=${nope:x}", "Unsupported interpolation type nope"),
    ("trainer.project_name=${oc.env:HYBRIDRL_UNSET_VAR}", "set it or give a default"),
    ("trainer.project_name=${trainer.experiment_name}", "circular"),
])
def test_resolver_errors_name_the_key(override, phrase):
    overrides = [override] + (["trainer.experiment_name=${trainer.project_name}"] if "circular" == phrase else [])
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert "trainer." in str(err.value) and phrase in str(err.value)


def test_composition_errors_name_the_file(tmp_path):
    path = write(tmp_path, "run.yaml", "defaults:\n  - ppo_trainer\n  - nope@data: x\n")
    with pytest.raises(ConfigError, match=r"cannot compose config file .*run.yaml.*Could not find 'nope/x'"):
        load_config(config_file=path)
