"""default_compute_score: every data source verl dispatches, result types, and the unknown-source error."""

from __future__ import annotations

import pytest

from hybridrl.rewards import CODE_SOURCES, REWARD_FNS, default_compute_score


def test_routes_by_data_source():
    assert default_compute_score("openai/gsm8k", "so #### 18", "18") == 1.0
    assert default_compute_score("openai/gsm8k", "so 18", "18") == 0.0
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"):
        assert default_compute_score(source, "thus $\\boxed{\\dfrac12}$", "\\frac{1}{2}") == 1.0
    assert default_compute_score("arithmetic", " 68\n", "68") == 1.0
    assert default_compute_score("arithmetic", "68.", "68") == 0.0
    assert isinstance(default_compute_score("arithmetic", "1", "1"), float)


@pytest.mark.parametrize("source", ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime_2025"])
def test_dapo_family_returns_verls_dict(source):
    assert default_compute_score(source, "Answer: 7", "7") == {"score": 1.0, "acc": True, "pred": "7"}
    assert default_compute_score(source, "Answer: 8", "7")["score"] == -1.0


@pytest.mark.parametrize("source", ["numina_aops_forum", "numina_synthetic_math", "numina_amc_aime",
                                    "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads"])
def test_numina_sources_score_one_or_zero(source):
    assert default_compute_score(source, "The answer is \\boxed{12}", "12") == 1.0
    assert default_compute_score(source, "The answer is \\boxed{13}", "12") == 0.0


def test_geometry_search_and_code_sources():
    assert default_compute_score("hiyouga/geometry3k", "<think>a</think>\\boxed{4}", "4") == 1.0
    for source in ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                   "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"):
        assert default_compute_score(source, "<answer>Paris</answer>", {"target": ["paris"]}) == 1.0
    assert set(CODE_SOURCES) == {"codecontests", "apps", "codeforces", "taco"}
    cases = {"inputs": ["2\n"], "outputs": ["4\n"]}
    assert default_compute_score("taco", "```python\nprint(int(input()) * 2)\n```", cases) == 1.0


def test_kwargs_reach_the_scorer():
    assert default_compute_score("openai/gsm8k", "it is 18", "18", extra_info={"index": 0}, method="flexible") == 1.0


def test_unknown_data_source_names_it_the_known_ones_and_the_fix():
    with pytest.raises(NotImplementedError) as error:
        default_compute_score("my/dataset", "x", "y")
    message = str(error.value)
    assert "'my/dataset'" in message and "custom_reward_function.path=" in message and "aime*" in message
    assert all(source in message for source in REWARD_FNS)
