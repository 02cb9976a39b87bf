"""The scoring pool under misbehaving reward functions: a call past reward_model.reward_fn_timeout_s has its
worker killed (C code included), an error in one worker is raised while another hangs, a worker that dies is
named by its row, and a slow batch logs its progress."""

from __future__ import annotations

import os

import pytest

from hybridrl.rewards.manager import RewardFunctionError
from hybridrl.rewards.pool import ScoreFnSpec, ScoringPool

REWARD_FILE = '''
import os
import re
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "regex":  # C code that never returns to the interpreter: no signal reaches it
        re.match(r"(a+)+$", "a" * 64 + "!")
    if solution_str == "sleep":
        time.sleep(3600)
    if solution_str == "slow":
        time.sleep(0.5)
    if solution_str == "boom":
        raise ValueError("cannot parse")
    if solution_str == "die":
        os._exit(7)
    return {"score": 1.0, "pid": os.getpid()}
'''


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> ScoreFnSpec:
    path = tmp_path_factory.mktemp("reward") / "misbehaving.py"
    path.write_text(REWARD_FILE)
    return ScoreFnSpec(str(path), "compute_score")


def rows(responses: dict[int, str], count: int = 8) -> tuple[list, list, list, list]:
    texts = [responses.get(i, "ok") for i in range(count)]
    return texts, [f"src{i}" for i in range(count)], ["1"] * count, [None] * count


@pytest.fixture
def make_pool(spec):
    pools = []

    def make(**kwargs) -> ScoringPool:
        pools.append(ScoringPool(spec, num_workers=2, **kwargs))
        return pools[-1]

    yield make
    for pool in pools:
        pool.close()
        assert pool.num_processes == 0


def test_c_code_past_the_deadline_has_its_worker_killed_and_the_row_named(make_pool):
    pool = make_pool(timeout_s=1.0)
    with pytest.raises(RewardFunctionError) as error:
        pool.score(*rows({5: "regex"}))
    message = str(error.value)
    for needle in ("misbehaving.py:compute_score", "sample 5", "'src5'", "reward_model.reward_fn_timeout_s=1",
                   "on_error=zero"):
        assert needle in message, needle
    assert pool.num_processes == 0  # an error kills the workers; the next batch starts fresh ones
    assert pool.score(*rows({})).scores == [1.0] * 8


def test_on_error_zero_scores_timed_out_rows_0_and_carries_on_with_a_new_worker(make_pool):
    pool = make_pool(on_error="zero", timeout_s=1.0)
    first = pool.score(*rows({}))
    scored = pool.score(*rows({2: "sleep", 6: "regex"}, count=12))
    assert scored.scores == [0.0 if i in (2, 6) else 1.0 for i in range(12)]
    assert scored.num_timeouts == 2 and scored.num_errors == 0
    assert set(scored.extra["pid"]) - {None} - set(first.extra["pid"]), "killed workers were replaced"
    assert pool.num_processes == 2


def test_an_error_in_one_worker_is_raised_while_another_hangs(make_pool):
    """No deadline at all: the hang in rows 0-1 must not hide the error in row 6, scored by the other worker."""
    pool = make_pool(timeout_s=None)
    with pytest.raises(RewardFunctionError, match=r"sample 6 \(data_source='src6'\) raised ValueError: cannot parse"):
        pool.score(*rows({0: "sleep", 6: "boom"}))
    assert pool.num_processes == 0  # the hanging worker was killed, not waited for


def test_a_worker_that_dies_is_named_by_its_row(make_pool):
    pool = make_pool()
    with pytest.raises(RewardFunctionError, match=r"died while scoring sample 3 \(data_source='src3'\).*exit code 7"):
        pool.score(*rows({3: "die"}))
    zero = make_pool(on_error="zero")
    scored = zero.score(*rows({3: "die"}))
    assert scored.scores == [0.0 if i == 3 else 1.0 for i in range(8)] and scored.num_errors == 1


def test_a_slow_pool_batch_logs_its_progress(make_pool, caplog):
    pool = make_pool(progress_every_s=0.3)
    pool.score(*rows({}))  # workers started: the next batch's clock runs on scoring alone
    caplog.clear()
    pool.score(*rows({1: "slow", 2: "slow", 5: "slow", 6: "slow"}))
    lines = [r.getMessage() for r in caplog.records if "reward scoring is slow" in r.getMessage()]
    assert lines and "rows done after" in lines[0] and "data_source='src" in lines[0]


def test_closing_the_pool_from_another_thread_kills_a_busy_batch(make_pool):
    """What the trainer does on Ctrl-C while a scoring thread (launch_reward_fn_async) waits on the pool."""
    import threading

    pool = make_pool(timeout_s=None)
    pool.score(*rows({}))  # workers up
    pids = [worker.process.pid for worker in pool._workers]
    outcome = {}

    def score() -> None:
        try:
            pool.score(*rows({0: "sleep", 5: "sleep"}))
        except RewardFunctionError as error:
            outcome["error"] = error

    thread = threading.Thread(target=score, daemon=True)
    thread.start()
    while not any(worker.rows for worker in pool._workers):  # bounded by the sleeps: rows go out at once
        thread.join(timeout=0.05)
    pool.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and "closed" in str(outcome["error"])
    assert pool.num_processes == 0
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}") and _running(pid)]


def _running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
