"""Search-R1 QA reward (verl search_r1_like_qa_em): exact match of the last <answer> after normalization."""

from __future__ import annotations

import numpy as np

from hybridrl.rewards.search_r1 import compute_score, compute_score_subem, extract_solution, normalize_answer


def test_normalize_answer():
    assert normalize_answer("  The Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("A cat and an apple") == "cat and apple"


def test_last_answer_tag_counts():
    assert extract_solution("<answer> Paris </answer> then <answer>Lyon</answer>") == "Lyon"
    assert extract_solution("<answer>unclosed") is None


def test_scores():
    truth = {"target": np.array(["Paris", "paris, france"], dtype=object)}  # as parquet hands it over
    assert compute_score("<answer>The paris</answer>", truth) == 1.0
    assert compute_score("<answer>Lyon</answer>", truth) == 0.0
    assert compute_score("<answer>Lyon</answer>", truth, format_score=0.2) == 0.2
    assert compute_score("Paris", truth) == 0  # no tag
    assert compute_score("<answer>Paris</answer>" * 11, truth) == 0.25  # tag spam earns a quarter
    assert compute_score("<answer>x</answer>", {"target": "X"}) == 1.0  # a single string target
    assert compute_score_subem("<answer>it is Paris indeed</answer>", truth) == 1.0
    assert compute_score_subem("<answer>Rome</answer>", truth) == 0.0
