"""Custom reward functions loaded from a file: kwargs pass-through, verl's call signature, clear load errors."""

from __future__ import annotations

import pytest

from hybridrl.rewards.custom import load_custom_reward_fn
from hybridrl.rewards.manager import RewardFunctionError, score_batch

BROKEN_FILE = '''
import helper_constant_is_not_listed as _unused  # noqa
'''

GOOD_FILE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, scale=1.0):
    hit = solution_str.strip() == ground_truth
    return {"score": scale * float(hit) + bonus, "acc": hit, "source": data_source}


def length_penalty(data_source, solution_str, ground_truth, extra_info=None):
    return -len(solution_str) / 100


def strict(data_source, solution_str, ground_truth, extra_info=None):
    return 1 / int(solution_str)


class NotAFunction:
    pass
'''


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(GOOD_FILE)
    return str(path)


def test_loads_default_name_and_passes_reward_kwargs(reward_file):
    fn = load_custom_reward_fn(reward_file, reward_kwargs={"bonus": 0.5, "scale": 2.0})
    assert fn("src", " 7 ", "7", extra_info={"index": 0}) == {"score": 2.5, "acc": True, "source": "src"}
    assert load_custom_reward_fn(reward_file)("src", "8", "7") == {"score": 0.0, "acc": False, "source": "src"}


def test_loads_another_name_and_scores_a_batch(reward_file):
    fn = load_custom_reward_fn(reward_file, name="length_penalty")
    assert score_batch(["ab", "abcd"], ["s", "s"], ["x", "x"], [None, None], fn).scores == [-0.02, -0.04]


def test_errors_inside_the_custom_function_name_it(reward_file):
    fn = load_custom_reward_fn(reward_file, name="strict", reward_kwargs=None)
    with pytest.raises(RewardFunctionError, match=r":strict on sample 1 .*ZeroDivisionError"):
        score_batch(["1", "0"], ["s", "s"], ["1", "1"], [None, None], fn)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="custom_reward_function.path=.*nope.py"):
        load_custom_reward_fn(str(tmp_path / "nope.py"))


def test_missing_function_lists_the_functions_found(reward_file):
    with pytest.raises(AttributeError) as error:
        load_custom_reward_fn(reward_file, name="score_fn")
    message = str(error.value)
    assert "'score_fn'" in message and reward_file in message
    assert "['compute_score', 'length_penalty', 'strict']" in message


def test_file_that_fails_to_import_names_the_file(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN_FILE)
    with pytest.raises(ImportError, match=r"broken.py failed: ModuleNotFoundError"):
        load_custom_reward_fn(str(path))


def test_verls_own_scorer_files_map_to_hybridrls(tmp_path):
    from hybridrl.rewards.custom import load_custom_reward_fn

    # verl's GDPO example: custom_reward_function.path=$REPO_ROOT/verl/utils/reward_score/rlla.py
    fn = load_custom_reward_fn(str(tmp_path / "verl" / "utils" / "reward_score" / "rlla.py"), "compute_score")
    result = fn("d", "<|im_start|>assistant<think>a</think><|im_end|>", "<think>x</think>", {"experiment_name": "qwen"})
    assert result == {"score": 1.0, "format_reward": 1.0, "accuracy_reward": 0.0}
    with pytest.raises(FileNotFoundError, match="is not a file"):
        load_custom_reward_fn(str(tmp_path / "verl" / "utils" / "reward_score" / "unknown.py"))
