"""verl's `math_verify` scorer: Hugging Face's math-verify decides whether any answer parsed from the
response (expressions or LaTeX) equals the ground truth parsed as `\\boxed{ground_truth}`: 1.0 or 0.0,
`timeout_score` when it runs past `timeout` seconds (it runs in a child process, as in verl, so the time
limit also holds on a scoring thread). Needs `pip install 'hybridrl[math]'`.

verl users reach it through a custom reward function; here it is also `compute_score_fn`, with verl's
custom-function signature, for `custom_reward_function.path=<this file>`, `name=compute_score_fn`.
"""

from __future__ import annotations

from typing import Any

from hybridrl.rewards.optional import require
from hybridrl.rewards.timeout import call_with_timeout


def verify_in_child(ground_truth_boxed: str, model_output: str) -> float:
    from math_verify.grader import verify
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig, parse

    gold = parse(ground_truth_boxed, (LatexExtractionConfig(),))
    predictions = parse(model_output, (ExprExtractionConfig(), LatexExtractionConfig()))
    if gold and predictions:
        return max(1.0 if any(verify(g, p) for g in gold) else 0.0 for p in predictions)
    return 0.0


def compute_score(model_output: str, ground_truth: str, timeout_score: float = 0, timeout: float = 30.0) -> float:
    require("math_verify", "the math_verify reward")
    try:
        return call_with_timeout(verify_in_child, ("\\boxed{" + ground_truth + "}", model_output), timeout)
    except TimeoutError:
        return timeout_score
    except RuntimeError:  # math-verify raised inside (verl prints it and scores 0)
        return 0.0


def compute_score_fn(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                     **kwargs: Any) -> float:
    return compute_score(solution_str, ground_truth, **kwargs)
