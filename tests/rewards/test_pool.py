"""reward_model.num_workers > 1: the reward function in spawned processes gives what scoring in process gives."""

from __future__ import annotations

import os

import pytest

from hybridrl.rewards.manager import RewardFunctionError, score_batch
from hybridrl.rewards.pool import ScoreFnSpec, ScoringPool

REWARD_FILE = '''
import os


def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    row = extra_info["row"]
    if solution_str == "boom":
        raise ValueError(f"cannot parse row {row}")
    if solution_str == "die":
        os._exit(3)  # a crash that takes the interpreter with it
    result = {"score": float(solution_str == ground_truth) + bonus, "pid": os.getpid()}
    if row % 3 == 0:
        result["third"] = row  # a key only some rows (and so some chunks) have
    return result
'''


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> ScoreFnSpec:
    path = tmp_path_factory.mktemp("reward") / "scores.py"
    path.write_text(REWARD_FILE)
    return ScoreFnSpec(str(path), "compute_score", {"bonus": 0.5})


def rows(count: int, responses: dict[int, str] | None = None) -> tuple[list, list, list, list]:
    responses = responses or {}
    texts = [responses.get(i, "7" if i % 2 else "8") for i in range(count)]
    return texts, ["custom"] * count, ["7"] * count, [{"row": i} for i in range(count)]


def test_workers_score_like_one_process_in_row_order(spec):
    batch = rows(37, {5: "boom", 30: "boom"})  # 37 rows: chunks of uneven end; two rows raise
    want = score_batch(*batch, spec.load(), on_error="zero")
    pool = ScoringPool(spec, num_workers=2, on_error="zero")
    try:
        got = pool.score(*batch)
    finally:
        pool.close()
    assert got.scores == want.scores and got.num_errors == want.num_errors == 2
    assert got.extra["third"] == want.extra["third"]  # None on the rows (and chunks) without the key
    assert os.getpid() in want.extra["pid"] and os.getpid() not in got.extra["pid"]  # other processes scored


def test_a_raising_row_is_named_by_its_batch_row(spec):
    pool = ScoringPool(spec, num_workers=2)
    try:
        with pytest.raises(RewardFunctionError, match=r"sample 29 .*ValueError: cannot parse row 29.*on_error=zero"):
            pool.score(*rows(40, {29: "boom"}))
    finally:
        pool.close()


def test_a_worker_that_dies_is_an_error_with_the_way_to_see_it(spec):
    pool = ScoringPool(spec, num_workers=2)
    with pytest.raises(RewardFunctionError, match=r"worker process died.*num_workers=2.*num_workers=1"):
        pool.score(*rows(8, {3: "die"}))
    pool.close()  # already closed after the failure: a no-op


def test_one_worker_is_not_a_pool(spec):
    with pytest.raises(ValueError, match="num_workers=1"):
        ScoringPool(spec, num_workers=1)


UNGUARDED_SCRIPT = '''
from hybridrl.rewards.pool import ScoreFnSpec, ScoringPool

pool = ScoringPool(ScoreFnSpec(), num_workers=2)  # at the top level: spawned workers run this again
pool.score(["#### 1"], ["openai/gsm8k"], ["1"], [None])
'''


def test_a_script_without_a_main_guard_is_told_so(tmp_path):
    """Spawned workers import the script that started them; without a main guard they start scoring pools
    of their own, which Python refuses, and the pool's error says what to add."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(UNGUARDED_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode != 0
    assert "RewardFunctionError" in proc.stderr and 'if __name__ == "__main__":' in proc.stderr, proc.stderr[-2000:]
