"""config/checkpoint_rules.py: save_contents / load_contents names, empty lists, and lists a resume cannot use."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config, validate_config

VALID = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4"]
ACTOR = "actor_rollout_ref.actor.checkpoint"


def problems(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_config(load_config(VALID + overrides))
    return str(caught.value)


def test_a_misspelt_part_is_refused_with_did_you_mean_and_every_meaning():
    message = problems([f"{ACTOR}.save_contents=[modle,optimizer,extra]"])
    assert f"{ACTOR}.save_contents has unknown part 'modle'; did you mean 'model'?" in message
    for part in ("model = the weights", "optimizer = the optimizer state", "extra = the LR schedule",
                 "hf_model = a full HF model copy"):
        assert part in message
    assert "critic.checkpoint.load_contents has unknown part 'sheduler'" in \
        problems(["critic.checkpoint.load_contents=[model,sheduler]"])


def test_an_empty_list_is_refused():
    message = problems([f"{ACTOR}.save_contents=[]"])
    assert f"{ACTOR}.save_contents=[] saves or loads nothing, so a resume would start from the initial weights" in message


def test_loading_what_this_run_does_not_save_is_refused_when_resuming():
    message = problems([f"{ACTOR}.save_contents=[model]", f"{ACTOR}.load_contents=[model,optimizer,extra]"])
    assert f"{ACTOR}.load_contents reads ['optimizer', 'extra'] but {ACTOR}.save_contents=['model'] does not" in message
    validate_config(load_config(VALID + [f"{ACTOR}.save_contents=[model]"]))  # load_contents follows: fine


def test_export_only_checkpoints_run_as_in_verl_with_a_warning():
    """verl's GMPO example saves only hf_model: verl runs it (a resume continues from the initial weights)."""
    from hybridrl.config.notices import config_notices

    cfg = load_config(VALID + [f"{ACTOR}.save_contents=[hf_model]"])
    validate_config(cfg)
    [notice] = [n for n in config_notices(cfg) if "load_contents" in n]
    assert notice.startswith(f"warning: {ACTOR}.load_contents=['hf_model'] reads nothing a resume can use")
    assert "add 'model'" in notice and "trainer.resume_mode=disable" in notice
    quiet = load_config(VALID + [f"{ACTOR}.save_contents=[hf_model]", "trainer.resume_mode=disable"])
    assert not [n for n in config_notices(quiet) if "load_contents" in n]
    assert not [n for n in config_notices(load_config(VALID)) if "load_contents" in n]


def test_verl_default_and_hf_model_lists_are_accepted():
    validate_config(load_config(VALID))
    validate_config(load_config(VALID + [f"{ACTOR}.save_contents=[model,optimizer,extra,hf_model]"]))
