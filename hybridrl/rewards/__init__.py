"""Rule rewards keyed by `data_source` (verl's `default_compute_score`), and custom reward functions.

Every data source verl dispatches is here, each scorer numerically equal to verl's (see each module):
gsm8k, MATH (math), DAPO/AIME (math_dapo), NuminaMath (prime_math), code contests (prime_code in the
local sandbox, or sandbox_fusion when `reward_model.sandbox_fusion.url` is set), Geometry3K (geo3k),
Search-R1 QA (search_r1); plus hybridrl's procedural tasks (arithmetic).
"""

from __future__ import annotations

from typing import Any, Callable

from hybridrl.rewards import arithmetic, geo3k, gsm8k, math, math_dapo, prime_math, search_r1

RewardResult = float | dict[str, Any]

MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
DAPO_SOURCES = ("math_dapo", "math", "math_dapo_reasoning")
NUMINA_SOURCES = ("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                  "numina_cn_k12", "numina_olympiads")
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
SEARCH_R1_SOURCES = ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                     "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle")
SANDBOX_KWARGS = ("sandbox_fusion_url", "concurrent_semaphore", "memory_limit_mb")


def code_score(solution_str: str, ground_truth: Any, sandbox_fusion_url: str | None = None,
               concurrent_semaphore: Any = None, memory_limit_mb: int | None = None, **kwargs: Any) -> float:
    """Tests run through SandboxFusion when a url is given, else in the local sandbox; partial credit (verl)."""
    if sandbox_fusion_url:
        from hybridrl.rewards import sandbox_fusion

        return sandbox_fusion.compute_score(sandbox_fusion_url, concurrent_semaphore, memory_limit_mb or 1024,
                                            solution_str, ground_truth, continuous=True, **kwargs)[0]
    from hybridrl.rewards import prime_code

    return prime_code.compute_score(solution_str, ground_truth, continuous=True,
                                    memory_mb=memory_limit_mb or prime_code.DEFAULT_MEMORY_MB)[0]


# data_source -> scorer(solution_str, ground_truth, **kwargs); names as in verl/utils/reward_score/__init__.py.
REWARD_FNS: dict[str, Callable[..., RewardResult]] = {
    "openai/gsm8k": gsm8k.compute_score,
    **{source: math.compute_score for source in MATH_SOURCES},
    **{source: math_dapo.compute_score for source in DAPO_SOURCES},
    **{source: prime_math.score for source in NUMINA_SOURCES},
    **{source: code_score for source in CODE_SOURCES},
    "hiyouga/geometry3k": geo3k.compute_score,
    **{source: search_r1.compute_score for source in SEARCH_R1_SOURCES},
    "arithmetic": arithmetic.compute_score,
    "digits/reverse": arithmetic.compute_score,  # exact match of the reversed digits (quickstart)
}
# data_source prefix -> scorer, for sources verl matches with startswith
PREFIX_FNS: dict[str, Callable[..., RewardResult]] = {"aime": math_dapo.compute_score}


def scorer_for(data_source: str) -> Callable[..., RewardResult]:
    """The built-in scorer of `data_source`; NotImplementedError naming the known ones and the fix."""
    scorer = REWARD_FNS.get(data_source)
    if scorer is None:
        scorer = next((fn for prefix, fn in PREFIX_FNS.items() if str(data_source).startswith(prefix)), None)
    if scorer is None:
        known = sorted(REWARD_FNS) + [f"{prefix}*" for prefix in PREFIX_FNS]
        raise NotImplementedError(
            f"no built-in reward for data_source {data_source!r}; built-in ones: {known}. Write "
            f"fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs) in a file and set "
            f"custom_reward_function.path=<file> (and custom_reward_function.name=<fn>)")
    return scorer


def default_compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                          sandbox_fusion_url: str | None = None, concurrent_semaphore: Any = None,
                          memory_limit_mb: int | None = None, **kwargs: Any) -> RewardResult:
    """Score one response with the rule for its `data_source` (verl's signature); `kwargs` go to that scorer."""
    scorer = scorer_for(data_source)
    if scorer is code_score:
        kwargs.update(sandbox_fusion_url=sandbox_fusion_url, concurrent_semaphore=concurrent_semaphore,
                      memory_limit_mb=memory_limit_mb)
    result = scorer(solution_str, ground_truth, **kwargs)
    if isinstance(result, dict):
        return result
    return float(result[0]) if isinstance(result, (tuple, list)) else float(result)


__all__ = ["CODE_SOURCES", "PREFIX_FNS", "REWARD_FNS", "RewardResult", "default_compute_score", "scorer_for"]
