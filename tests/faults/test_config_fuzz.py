"""Config fuzz: every numeric key with NaN, +-inf, -1, 0, huge and wrong-typed values.

Each value is either accepted, and then inside the key's range in `config/ranges.py` (nothing the table
calls invalid gets through), or refused with a ConfigError that names the key. Any other exception, or
a validation that never returns, is a defect.
"""

from __future__ import annotations

import math

import pytest

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.config.correction_rules import threshold_text_bounds
from hybridrl.config.index import config_value, schema_index, type_arms
from hybridrl.config.ranges import LIST_RANGES, RANGES

BASE = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4"]
VALUES = ["nan", "inf", "-1", "0", str(10**30), "abc"]  # one of each kind; the slow variant tries more
MORE_VALUES = ["-inf", "1e30", "0.5", "-0.0", str(2**31), str(2**32), "[1]", "{a: 1}", "true", "null"]


def numeric_keys() -> list[str]:
    return [path for path, spec in schema_index().items()
            if spec.section is None and any(arm in (int, float) for arm in type_arms(spec.hint))]


def outcome(overrides: list[str]) -> tuple[object, str | None]:
    """(the loaded config or None, the ConfigError's message or None)."""
    try:
        cfg = load_config(BASE + overrides)
        validate_config(cfg, world_size=1)
    except ConfigError as err:
        return None, str(err)
    return cfg, None


def test_the_base_config_is_valid():
    cfg, error = outcome([])
    assert error is None, error


def check_values(key: str, values: list[str]) -> None:
    for text in values:
        cfg, error = outcome([f"{key}={text}"])
        if error is not None:
            assert key in error, (text, error)
            continue
        value = config_value(cfg, key)
        # a key that also takes text (verl's 'lower_upper' thresholds): every number of the text is in range
        numbers = (threshold_text_bounds(value) or [math.nan]) if isinstance(value, str) else [value]
        assert value is None or all(RANGES[key].allows(n) for n in numbers), \
            f"{key}={text} accepted as {value!r} outside its range"


@pytest.mark.parametrize("key", numeric_keys())
def test_every_value_is_in_range_or_refused_by_name(key):
    check_values(key, VALUES)


@pytest.mark.slow
@pytest.mark.parametrize("key", numeric_keys())
def test_more_values_are_in_range_or_refused_by_name(key):
    check_values(key, MORE_VALUES)


@pytest.mark.parametrize("key", sorted(LIST_RANGES))
def test_list_keys_refuse_bad_elements_by_name(key):
    bounded = LIST_RANGES[key].low is not None
    for text in ("[nan,0.9]", "[0.9,inf]", "[abc,0.9]") + (("[-1,0.9]", "[0.9,1.0]") if bounded else ()):
        cfg, error = outcome([f"{key}={text}"])
        assert error is not None and key in error, (text, error)
    assert outcome([f"{key}=[0.8,0.95]"])[1] is None


def test_the_audit_cases_are_refused():
    """Issue #27's accepted-but-corrupting values: each is now a ConfigError naming the key and a fix."""
    cases = {
        "actor_rollout_ref.actor.grad_clip=-1": "reverses it",
        "actor_rollout_ref.actor.grad_clip=0": "zeroes every update",
        "actor_rollout_ref.actor.ppo_epochs=0": "0 never updates",
        "actor_rollout_ref.actor.ppo_epochs=-1": "0 never updates",
        "algorithm.lam=nan": "GAE lambda",
        "actor_rollout_ref.actor.entropy_coeff=nan": "finite",
        "data.gen_batch_size=3": "must be >= data.train_batch_size",
    }
    for override, reason in cases.items():
        error = outcome([override])[1]
        key = override.split("=")[0]
        assert error is not None and key in error and reason in error and "set " in error, (override, error)


def test_meaningful_special_values_are_accepted():
    for override in ("actor_rollout_ref.actor.grad_clip=inf", "critic.cliprange_value=inf", "data.train_max_samples=-1",
                     "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1", "actor_rollout_ref.actor.entropy_coeff=-0.01",
                     "trainer.save_freq=0", "trainer.max_actor_ckpt_to_keep=0", "actor_rollout_ref.rollout.top_k=0"):
        assert outcome([override])[1] is None, override
