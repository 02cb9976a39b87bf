"""VERL_USE_EXTERNAL_MODULES: a user's file registers a loss and an estimator before the first lookup."""

import textwrap

import pytest

from hybridrl.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, get_adv_estimator_fn, get_policy_loss_fn
from hybridrl.utils import external_modules

USER_FILE = textwrap.dedent('''
    from hybridrl.algorithms import register_adv_est, register_policy_loss

    @register_policy_loss("user_loss_from_file")
    def user_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                  rollout_is_weights=None):
        return (-(advantages * log_prob) * response_mask).sum(), {}

    @register_adv_est("user_estimator_from_file", needs_groups=True)
    def user_estimator(token_level_rewards, response_mask, index, **kwargs):
        return token_level_rewards, token_level_rewards
''')


@pytest.fixture
def fresh_imports(monkeypatch):
    monkeypatch.setattr(external_modules, "_imported", set())
    yield
    POLICY_LOSSES.pop("user_loss_from_file", None)
    ADVANTAGE_ESTIMATORS.pop("user_estimator_from_file", None)


def test_a_file_named_in_the_variable_registers_before_the_first_lookup(tmp_path, monkeypatch, fresh_imports):
    path = tmp_path / "my_algorithms.py"
    path.write_text(USER_FILE)
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", f" {path} ")
    assert get_policy_loss_fn("user_loss_from_file").__name__ == "user_loss"
    assert get_adv_estimator_fn("user_estimator_from_file").__name__ == "user_estimator"
    assert ADVANTAGE_ESTIMATORS["user_estimator_from_file"].needs_groups


def test_a_module_name_on_the_path_works_too(tmp_path, monkeypatch, fresh_imports):
    (tmp_path / "my_algorithm_pkg.py").write_text(USER_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_algorithm_pkg")
    assert get_policy_loss_fn("user_loss_from_file").__name__ == "user_loss"


def test_bad_entries_say_what_to_do(tmp_path, monkeypatch, fresh_imports):
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "no_such_module_xyz")
    with pytest.raises(ImportError, match="put it on PYTHONPATH"):
        get_policy_loss_fn("user_loss_from_file")
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", str(tmp_path / "missing.py"))
    with pytest.raises(ImportError, match="not a file"):
        get_policy_loss_fn("user_loss_from_file")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", str(broken))
    with pytest.raises(ImportError, match="RuntimeError: boom"):
        get_policy_loss_fn("user_loss_from_file")


def test_without_the_variable_an_unknown_name_lists_the_registered_ones(monkeypatch, fresh_imports):
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    with pytest.raises(ValueError, match="VERL_USE_EXTERNAL_MODULES"):
        get_policy_loss_fn("user_loss_from_file")
