"""The torch-free table of what each advantage estimator needs, against the estimator registry."""

from __future__ import annotations

from hybridrl.algorithms import ADVANTAGE_ESTIMATORS
from hybridrl.config import critic_enabled, load_config
from hybridrl.config.estimator_needs import ESTIMATOR_NEEDS, EstimatorNeeds, estimator_needs, grouped_estimators
from hybridrl.config.run_plan import RoleNeeds, role_needs


def test_the_table_names_exactly_the_registrys_estimators():
    assert sorted(ESTIMATOR_NEEDS) == sorted(ADVANTAGE_ESTIMATORS)


def test_the_table_agrees_with_what_each_estimator_checks_for():
    """Where the registry's spec states a need (its `needs_*` flags), the table states the same one."""
    for name, spec in ADVANTAGE_ESTIMATORS.items():
        needs = ESTIMATOR_NEEDS[name]
        for flag, stated in (("needs_critic", needs.critic), ("needs_greedy_baseline", needs.greedy_baseline),
                             ("needs_groups", needs.groups), ("needs_sum_pi_squared", needs.sum_pi_squared)):
            if hasattr(spec, flag):
                assert getattr(spec, flag) == stated, (name, flag)


def test_needs_decide_the_roles_and_phases():
    assert estimator_needs("gae") == EstimatorNeeds(critic=True)
    assert estimator_needs("no_such_estimator") == EstimatorNeeds()  # the config rules name it, with the choices
    assert "grpo" in grouped_estimators() and "gae" not in grouped_estimators()
    assert role_needs(load_config(["algorithm.adv_estimator=remax"])) == RoleNeeds(False, False, True)
    assert role_needs(load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true"])) == \
        RoleNeeds(critic=False, reference=True, greedy_baseline=False)
    assert critic_enabled(load_config(["algorithm.adv_estimator=gae"])) is True
