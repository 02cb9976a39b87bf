"""Rules of the asynchronous trainer modes that span several keys: each refusal names the keys to change."""

from __future__ import annotations

import pytest

from hybridrl.config import load_config
from hybridrl.config.errors import ConfigError
from hybridrl.config.notices import config_notices
from hybridrl.config.validate import validate_config

COLOCATE = "trainer.v1.trainer_mode=colocate_async"
KEEP_KV = "actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates=false"


def refused(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate_config(load_config(overrides))


VALID = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "critic.use_dynamic_bsz=true"]
SPLIT = ["trainer.v1.trainer_mode=separate_async", "trainer.n_gpus_per_node=2",
         "actor_rollout_ref.actor.device_ids=[0]", "actor_rollout_ref.rollout.device_ids=[1]"]


def test_kept_kv_is_refused_where_nothing_is_parked():
    refused([KEEP_KV], "recompute_kv_cache_after_weight_updates=false keeps the KV cache.*now sync")


def test_kept_kv_needs_the_prefix_cache():
    refused([COLOCATE, KEEP_KV, "actor_rollout_ref.rollout.enable_prefix_caching=false"],
            "enable_prefix_caching=false turns off; set enable_prefix_caching=true")


def test_kept_kv_in_colocate_async_says_the_cache_stays_through_training():
    stays = [n for n in config_notices(load_config([COLOCATE, KEEP_KV])) if "recompute_kv_cache" in n]
    assert len(stays) == 1 and "stays allocated while the actor trains" in stays[0]
    assert not [n for n in config_notices(load_config([COLOCATE])) if "recompute_kv_cache" in n]
    assert not [n for n in config_notices(load_config(
        [COLOCATE, KEEP_KV, "actor_rollout_ref.rollout.free_cache_engine=false"])) if "recompute_kv_cache" in n]


def test_kept_kv_is_accepted_in_both_async_modes():
    validate_config(load_config(VALID + [COLOCATE, KEEP_KV]))
    validate_config(load_config(VALID + SPLIT + [KEEP_KV]))


def test_colocate_async_refuses_a_rollout_on_devices_of_its_own():
    refused([COLOCATE, "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.device_ids=[0]",
             "actor_rollout_ref.rollout.device_ids=[1]"], "set trainer_mode=separate_async")


def test_separate_async_needs_disjoint_device_lists():
    refused(["trainer.v1.trainer_mode=separate_async"], "give both lists, disjoint")
