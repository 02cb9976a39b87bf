"""Rule-based rewards keyed by `data_source` (verl's `default_compute_score`), and custom reward functions."""

from __future__ import annotations

from typing import Any, Callable

from hybridrl.rewards import arithmetic, gsm8k, math

RewardResult = float | dict[str, Any]

# data_source → scorer(solution_str, ground_truth, **kwargs); names as in verl/utils/reward_score/__init__.py.
REWARD_FNS: dict[str, Callable[..., float]] = {
    "openai/gsm8k": gsm8k.compute_score,
    "lighteval/MATH": math.compute_score,
    "DigitalLearningGmbH/MATH-lighteval": math.compute_score,
    "HuggingFaceH4/MATH-500": math.compute_score,
    "arithmetic": arithmetic.compute_score,
    "digits/reverse": arithmetic.compute_score,  # exact match of the reversed digits (quickstart)
}


def default_compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                          **kwargs: Any) -> RewardResult:
    """Score one response with the rule for its `data_source`; `kwargs` go to that scorer (e.g. gsm8k `method`)."""
    scorer = REWARD_FNS.get(data_source)
    if scorer is None:
        raise NotImplementedError(
            f"no built-in reward for data_source {data_source!r}; built-in ones: {sorted(REWARD_FNS)}. "
            f"Write fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs) in a file and set "
            f"custom_reward_function.path=<file> (and custom_reward_function.name=<fn>)")
    result = scorer(solution_str, ground_truth, **kwargs)
    return result if isinstance(result, dict) else float(result)


__all__ = ["REWARD_FNS", "RewardResult", "default_compute_score"]
