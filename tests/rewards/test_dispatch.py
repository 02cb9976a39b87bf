"""default_compute_score: routing by data_source, result types, and the unknown-source error."""

from __future__ import annotations

import pytest

from hybridrl.rewards import REWARD_FNS, default_compute_score


def test_routes_by_data_source():
    assert default_compute_score("openai/gsm8k", "so #### 18", "18") == 1.0
    assert default_compute_score("openai/gsm8k", "so 18", "18") == 0.0
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"):
        assert default_compute_score(source, "thus $\\boxed{\\dfrac12}$", "\\frac{1}{2}") == 1.0
    assert default_compute_score("arithmetic", " 68\n", "68") == 1.0
    assert default_compute_score("arithmetic", "68.", "68") == 0.0
    assert isinstance(default_compute_score("arithmetic", "1", "1"), float)


def test_kwargs_reach_the_scorer():
    assert default_compute_score("openai/gsm8k", "it is 18", "18", extra_info={"index": 0}, method="flexible") == 1.0


def test_unknown_data_source_names_it_the_known_ones_and_the_fix():
    with pytest.raises(NotImplementedError) as error:
        default_compute_score("my/dataset", "x", "y")
    message = str(error.value)
    assert "'my/dataset'" in message and "custom_reward_function.path=" in message
    assert all(source in message for source in REWARD_FNS)
