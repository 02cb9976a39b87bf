"""reward_model.reward_fn_timeout_s in the trainer's process: calls past it are stopped on the main thread and
on a scoring thread, a call that cannot be stopped is reported, and a slow batch logs its progress."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from hybridrl.rewards.manager import RewardFunctionError, score_batch

HANG_ROW = 1


def _hangs_by_sleeping(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "hang":
        time.sleep(3600)
    return 1.0


def _sleeps_8s(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(8.0 if solution_str == "hang" else 0.0)  # bounded: the abandoned thread ends within the test session
    return 1.0


def _hangs_in_a_loop_it_guards(data_source, solution_str, ground_truth, extra_info=None):
    while solution_str == "hang":
        try:
            sum(range(1000))
        except Exception:  # a function's catch-all must not swallow the timeout
            pass
    return 1.0


def _rows(count: int = 3) -> tuple[list, list, list, list]:
    texts = ["ok"] * count
    texts[HANG_ROW] = "hang"
    sources = [f"src{i}" for i in range(count)]
    return texts, sources, ["x"] * count, [None] * count


@pytest.mark.parametrize("fn", [_hangs_by_sleeping, _hangs_in_a_loop_it_guards])
def test_main_thread_call_past_the_deadline_stops_naming_row_source_and_key(fn):
    with pytest.raises(RewardFunctionError) as error:
        score_batch(*_rows(), fn, timeout_s=0.3)
    message = str(error.value)
    for needle in (fn.__name__, f"sample {HANG_ROW}", "'src1'", "reward_model.reward_fn_timeout_s=0.3",
                   "on_error=zero", "reward/num_timeouts"):
        assert needle in message, needle


def test_on_error_zero_scores_a_timed_out_row_0_and_counts_it():
    scored = score_batch(*_rows(4), _hangs_by_sleeping, on_error="zero", timeout_s=0.3)
    assert scored.scores == [1.0, 0.0, 1.0, 1.0]
    assert scored.num_timeouts == 1 and scored.num_errors == 0


def test_the_previous_alarm_handler_is_back_after_the_batch():
    def mine(signum, frame):
        return None

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        score_batch(*_rows(), _hangs_by_sleeping, on_error="zero", timeout_s=0.2)
        assert signal.getsignal(signal.SIGALRM) is mine
    finally:
        signal.signal(signal.SIGALRM, previous)


def _on_a_thread(fn, **kwargs):
    """score_batch on another thread (as launch_reward_fn_async runs it): (result or error, stuck rows)."""
    stuck, outcome = [], {}

    def run():
        try:
            outcome["result"] = score_batch(*_rows(), fn, on_stuck=stuck.append, **kwargs)
        except BaseException as error:  # noqa: BLE001 - inspected by the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    return outcome, stuck, thread


def test_a_python_loop_on_a_scoring_thread_is_interrupted():
    outcome, stuck, thread = _on_a_thread(_hangs_in_a_loop_it_guards, on_error="zero", timeout_s=0.3)
    assert not thread.is_alive() and stuck == []
    assert outcome["result"].scores == [1.0, 0.0, 1.0] and outcome["result"].num_timeouts == 1


def test_a_blocking_call_on_a_scoring_thread_is_reported_stuck():
    """A sleep cannot be interrupted on a thread: once past the deadline and its grace the waiter is told
    which row it is; the thread is abandoned (it is a daemon, so it never holds the process)."""
    started = time.monotonic()
    done = threading.Event()
    stuck = []

    def run():
        try:
            score_batch(*_rows(), _sleeps_8s, on_stuck=lambda row: (stuck.append(row), done.set()), timeout_s=0.3)
        except BaseException:  # noqa: BLE001 - abandoned: when the sleep ends the thread stops with the timeout
            pass

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(timeout=20), "the stuck call was never reported"
    assert [(row.row, row.data_source) for row in stuck] == [(HANG_ROW, "src1")]
    assert time.monotonic() - started >= 0.3


def _slow(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(0.4 if data_source == "slow" else 0.0)
    return 0.5


def test_a_slow_batch_logs_rows_done_elapsed_and_the_slowest_rows_source(caplog):
    score_batch(["a", "b", "c"], ["fast", "slow", "fast"], ["x"] * 3, [None] * 3, _slow, progress_every_s=0.2)
    lines = [r.getMessage() for r in caplog.records if "reward scoring is slow" in r.getMessage()]
    assert lines, "no progress line for a batch that took twice the interval"
    assert "1/3 rows done after" in lines[0] and "row 1 (data_source='slow'" in lines[0]
    assert "reward_model.reward_fn_timeout_s=null" in lines[0]


def test_a_fast_batch_logs_nothing(caplog):
    score_batch(["a"], ["fast"], ["x"], [None], _slow, progress_every_s=5.0, timeout_s=5.0)
    assert not [r for r in caplog.records if "slow" in r.getMessage()]


def test_on_timeout_zero_keeps_raising_for_errors():
    """verl's naive `compute_score_timeout`: a timed-out row scores 0 while a raising one still stops the run."""
    scored = score_batch(*_rows(), _hangs_by_sleeping, timeout_s=0.2, on_timeout="zero")
    assert scored.scores == [1.0, 0.0, 1.0] and scored.num_timeouts == 1
    with pytest.raises(ValueError, match="'skip'"):
        score_batch(*_rows(), _hangs_by_sleeping, timeout_s=0.2, on_timeout="skip")
