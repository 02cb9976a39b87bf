"""verl's interaction YAML read at start-up without importing classes: names (verl's default rule), OmegaConf
interpolation, and a missing file listed with the other missing inputs."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config
from hybridrl.config.input_paths import missing_paths
from hybridrl.config.interaction_file import InteractionEntry, default_interaction_name, read_interaction_entries

KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


@pytest.mark.parametrize(("class_name", "name"), [("verl.interactions.gsm8k_interaction.Gsm8kInteraction", "gsm8k"),
                                                  ("recipe.collabllm.collabllm_interation.CollabLLMInteraction", "collabllm"),
                                                  ("my.users.Tutor", "tutor")])
def test_an_entry_without_name_gets_verls_name(class_name, name):
    assert default_interaction_name(class_name) == name


def test_entries_are_read_with_interpolations_resolved(tmp_path, monkeypatch):
    monkeypatch.setenv("USER_MODEL", "gpt-4o-mini")
    path = tmp_path / "collabllm_interaction_config.yaml"
    path.write_text('interaction:\n  - name: "collabllm"\n    class_name: "recipe.collabllm.collabllm_interation.'
                    'CollabLLMInteraction"\n    config: {"user_model": "${oc.env:USER_MODEL}", "num_retries": 3}\n')
    assert read_interaction_entries(str(path)) == [InteractionEntry(
        "collabllm", "recipe.collabllm.collabllm_interation.CollabLLMInteraction",
        {"user_model": "gpt-4o-mini", "num_retries": 3}, f"{path}: interaction[0]")]


def test_a_missing_file_is_listed_with_the_key(tmp_path):
    cfg = load_config([f"{KEY}={tmp_path}/nowhere.yaml"])
    assert f"{KEY}='{tmp_path}/nowhere.yaml': no such file" in missing_paths(cfg)
    with pytest.raises(ConfigError, match=f"{KEY}='{tmp_path}/nowhere.yaml': no such file"):
        read_interaction_entries(f"{tmp_path}/nowhere.yaml")
