"""score_batch (results, extra info, error modes) and place_scores (score at the last response token)."""

from __future__ import annotations

import functools
import math
import re

import pytest
import torch

from hybridrl.rewards import default_compute_score
from hybridrl.rewards.manager import RewardFunctionError, ground_truths, place_scores, score_batch


def _with_extra(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "plain":
        return 0.5
    return {"score": 1.0, "acc": solution_str == ground_truth, "tag": extra_info["tag"]}


def _fails_on_b(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "b":
        raise KeyError("missing field")
    return 1


def test_scores_and_extra_info_aligned_per_row():
    scored = score_batch(["x", "plain", "y"], ["d"] * 3, ["x", "x", "x"], [{"tag": 1}, {}, {"tag": 3}], _with_extra)
    assert scored.scores == [1.0, 0.5, 1.0]
    assert scored.extra == {"acc": [True, None, False], "tag": [1, None, 3]}
    assert scored.num_errors == 0


def test_real_gsm8k_dispatch(gsm8k_dir):
    import json

    rows = [json.loads(line) for line in (gsm8k_dir / "test.jsonl").read_text().splitlines()[:3]]
    truths = [row["answer"].split("#### ")[-1].replace(",", "") for row in rows]
    responses = [rows[0]["answer"], "I don't know", rows[2]["answer"].replace("####", "answer:")]
    scored = score_batch(responses, ["openai/gsm8k"] * 3, truths, [None] * 3, default_compute_score)
    assert scored.scores == [1.0, 0.0, 0.0]


def test_raising_function_is_named_with_sample_and_fix():
    with pytest.raises(RewardFunctionError) as error:
        score_batch(["a", "b"], ["src/a", "src/b"], ["1", "2"], [None, None], _fails_on_b)
    message = str(error.value)
    for needle in (f"{__name__}:_fails_on_b", "sample 1", "'src/b'", "KeyError", "missing field",
                   "reward_model.on_error=zero", "reward/num_errors"):
        assert needle in message
    assert isinstance(error.value.__cause__, KeyError)


def test_on_error_zero_scores_zero_and_counts():
    scored = score_batch(["a", "b", "b"], ["s"] * 3, ["1"] * 3, [None] * 3, _fails_on_b, on_error="zero")
    assert scored.scores == [1.0, 0.0, 0.0] and scored.num_errors == 2


def test_partial_is_named_by_its_function():
    fn = functools.partial(_fails_on_b)
    with pytest.raises(RewardFunctionError, match="_fails_on_b"):
        score_batch(["b"], ["s"], ["1"], [None], fn)


@pytest.mark.parametrize("result, needle", [("1.0", "returned str"), (None, "returned NoneType"),
                                            (math.nan, "must be finite"), ({"acc": 1}, "without 'score'")])
def test_bad_results_are_errors_even_with_on_error_zero(result, needle):
    with pytest.raises(RewardFunctionError, match=needle):
        score_batch(["a"], ["s"], ["1"], [None], lambda *args: result, on_error="zero")


def test_tensor_and_bool_results_become_floats():
    assert score_batch(["a"], ["s"], ["1"], [None], lambda *a: torch.tensor(0.25)).scores == [0.25]
    assert score_batch(["a"], ["s"], ["1"], [None], lambda *a: True).scores == [1.0]


def test_argument_errors():
    with pytest.raises(ValueError, match="on_error='skip'"):
        score_batch([], [], [], [], _with_extra, on_error="skip")
    with pytest.raises(ValueError, match="different lengths"):
        score_batch(["a"], [], ["1"], [None], _with_extra)


def test_place_scores_at_last_valid_token_by_hand():
    placed = place_scores([1.0, 2.0, 3.0], [3, 1, 0], response_len=4)
    assert placed.tolist() == [[0, 0, 1, 0], [2, 0, 0, 0], [3, 0, 0, 0]]
    assert placed.dtype == torch.float32
    assert place_scores([0.5], torch.tensor([4]), 4).tolist() == [[0, 0, 0, 0.5]]


def test_place_scores_rejects_bad_lengths():
    with pytest.raises(ValueError, match=r"0\.\.4"):
        place_scores([1.0], [5], 4)
    with pytest.raises(ValueError, match="2 scores but 1"):
        place_scores([1.0, 2.0], [1], 4)


def _exits(data_source, solution_str, ground_truth, extra_info=None):
    raise SystemExit(0)


@pytest.mark.parametrize("on_error", ["raise", "zero"])
def test_sys_exit_in_a_reward_function_is_an_error_naming_it(on_error):
    with pytest.raises(RewardFunctionError) as error:
        score_batch(["a"], ["src"], ["1"], [None], _exits, on_error=on_error)
    message = str(error.value)
    assert f"{__name__}:_exits" in message and "sys.exit(0)" in message and "sample 0" in message
    assert isinstance(error.value.__cause__, SystemExit)


@pytest.mark.parametrize("value", [1e308, -1e39, 3.5e38])
def test_a_score_beyond_float32_is_refused_naming_row_and_value(value):
    expected = re.escape(f"sample 1 (data_source='b') returned {value:g}, which is inf in float32")
    with pytest.raises(RewardFunctionError, match=expected):
        score_batch(["x", "y"], ["a", "b"], ["1"] * 2, [None] * 2, lambda ds, *rest: value if ds == "b" else 0.0)
    assert score_batch(["x"], ["a"], ["1"], [None], lambda *a: 3.4e38).scores == [3.4e38]  # the largest float32


def test_ground_truths_name_the_rows_without_one_for_built_in_scorers():
    infos = [{"ground_truth": "4"}, {"style": "rule"}, None, {"ground_truth": None}, {"ground_truth": "0"}]
    sources = ["openai/gsm8k"] * 5
    with pytest.raises(RewardFunctionError) as error:
        ground_truths(infos, sources, needs_ground_truth=True)
    message = str(error.value)
    assert "3 of 5 rows have no reward_model.ground_truth" in message
    assert "rows 1 (data_source='openai/gsm8k'), 2 (" in message and "3 (" in message and "custom_reward_function" in message
    assert ground_truths(infos, sources, needs_ground_truth=False) == (["4", None, None, None, "0"], [1, 2, 3])
