"""Exact-match reward for the procedural tasks (`arithmetic`, `digits/reverse`): 1.0 when the stripped
response is exactly the answer."""

from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str | int) -> float:
    """1.0 if `solution_str.strip() == str(ground_truth).strip()`, else 0.0 (no partial credit)."""
    return 1.0 if solution_str.strip() == str(ground_truth).strip() else 0.0
