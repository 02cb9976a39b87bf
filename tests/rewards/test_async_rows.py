"""`async def` reward functions: rows in flight together, verl's keyword call, deadlines and errors per row, the
worker-process path, and the GenRM keyword arguments a function gets only when it takes them."""

from __future__ import annotations

import logging

import pytest

from hybridrl.rewards.async_rows import blocking, is_async_function, score_batch_async
from hybridrl.rewards.custom import load_custom_reward_fn
from hybridrl.rewards.manager import RewardFunctionError
from hybridrl.rewards.managers import build_reward_manager
from tests.rewards.managers.helpers import config, rows

ASYNC_FILE = '''
import asyncio

arrived = 0


async def barrier(data_source, solution_str, ground_truth, extra_info=None, rows=4):
    """Returns only once `rows` calls are in flight together: one-after-another scoring never gets there."""
    global arrived
    arrived += 1
    while arrived < rows:
        await asyncio.sleep(0.001)
    return {"score": float(solution_str == ground_truth), "pred": solution_str}


async def baseline(solution_str, ground_truth, **kwargs):  # verl-recipe fapo's compute_score_baseline signature
    return 1.0 if solution_str == ground_truth else -1.0


async def slow(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "hang":
        await asyncio.sleep(60)
    return float(solution_str == ground_truth)


async def own_timeout(data_source, solution_str, ground_truth, extra_info=None):
    raise TimeoutError("the client's own deadline")


async def genrm(data_source, solution_str, ground_truth, extra_info, reward_router_address, reward_model_tokenizer):
    return {"score": 1.0, "address": reward_router_address, "tokenizer": reward_model_tokenizer}


async def any_kwargs(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": 0.0, "keys": ",".join(sorted(kwargs))}


def address_only(data_source, solution_str, ground_truth, extra_info=None, reward_router_address=None, bonus=0):
    return {"score": float(bonus), "address": reward_router_address}


def plain(data_source, solution_str, ground_truth, extra_info=None):
    return 0.5
'''
OFFERED = {"reward_router_address": "127.0.0.1:1234", "reward_model_tokenizer": "the-tokenizer"}


@pytest.fixture
def async_file(tmp_path):
    path = tmp_path / "async_reward.py"
    path.write_text(ASYNC_FILE)
    return str(path)


def score(fn, texts, truths, **kwargs):
    count = len(texts)
    return score_batch_async(list(texts), ["src"] * count, list(truths), [None] * count, fn, **kwargs)


def test_rows_are_in_flight_together_and_come_back_in_order(async_file):
    fn = load_custom_reward_fn(async_file, "barrier")
    assert is_async_function(fn)
    scored = score(fn, ["1", "2", "3", "4"], ["1", "0", "3", "0"], timeout_s=10.0)
    assert scored.scores == [1.0, 0.0, 1.0, 0.0] and scored.extra == {"pred": ["1", "2", "3", "4"]}


def test_called_by_keyword_as_verl_calls_it(async_file):
    scored = score(load_custom_reward_fn(async_file, "baseline"), ["a", "b"], ["a", "a"])
    assert scored.scores == [1.0, -1.0]


def test_a_row_past_its_deadline_follows_on_error(async_file):
    fn = load_custom_reward_fn(async_file, "slow")
    scored = score(fn, ["x", "hang", "y"], ["x", "x", "x"], on_error="zero", timeout_s=0.2)
    assert scored.scores == [1.0, 0.0, 0.0] and scored.num_timeouts == 1 and scored.num_errors == 0
    with pytest.raises(RewardFunctionError, match=r"sample 1 .*reward_fn_timeout_s=0.2"):
        score(fn, ["x", "hang"], ["x", "x"], timeout_s=0.2)


def test_a_timeout_error_of_the_function_itself_is_an_error_not_a_deadline(async_file):
    fn = load_custom_reward_fn(async_file, "own_timeout")
    scored = score(fn, ["x"], ["x"], on_error="zero", timeout_s=30.0)
    assert scored.num_errors == 1 and scored.num_timeouts == 0
    with pytest.raises(RewardFunctionError, match="sample 0 .*raised TimeoutError: the client's own deadline"):
        score(fn, ["x"], ["x"])


def test_blocking_runs_an_async_function_to_its_end(async_file):
    fn = blocking(load_custom_reward_fn(async_file, "baseline"))
    assert fn("src", "a", "a", None) == 1.0
    plain = load_custom_reward_fn(async_file, "plain")
    assert blocking(plain) is plain


def test_the_naive_manager_scores_an_async_function_concurrently(async_file):
    manager = build_reward_manager(config(f"custom_reward_function.path={async_file}",
                                          "custom_reward_function.name=barrier"), None)
    scored = manager(None, rows(["1", "2", "3", "4"], ["1", "1", "3", "3"]))
    assert scored.scores == [1.0, 0.0, 1.0, 0.0]


def test_worker_processes_run_an_async_function(async_file):
    manager = build_reward_manager(config(f"custom_reward_function.path={async_file}",
                                          "custom_reward_function.name=baseline", "reward_model.num_workers=2"), None)
    try:
        assert manager(None, rows(["a", "b", "a"], ["a", "a", "a"])).scores == [1.0, -1.0, 1.0]
    finally:
        manager.close()


@pytest.mark.slow  # the prime manager's process pool takes seconds to start
def test_the_prime_managers_processes_run_an_async_function(async_file):
    manager = build_reward_manager(config("reward_manager.name=prime", f"custom_reward_function.path={async_file}",
                                          "custom_reward_function.name=baseline",
                                          "+reward_model.reward_kwargs.num_processes=2"), None)
    try:
        assert manager(None, rows(["a", "b"], ["a", "a"])).scores == [1.0, -1.0]
    finally:
        manager.close()


def test_worker_processes_get_the_genrm_kwargs_too(async_file):
    manager = build_reward_manager(config(f"custom_reward_function.path={async_file}",
                                          "custom_reward_function.name=genrm", "reward_model.num_workers=2"),
                                   None, offered_kwargs=OFFERED)
    try:
        assert manager(None, rows(["a", "b"], ["a", "a"])).extra["address"] == ["127.0.0.1:1234"] * 2
    finally:
        manager.close()


def test_genrm_kwargs_go_to_a_function_that_declares_them(async_file):
    scored = score(load_custom_reward_fn(async_file, "genrm", offered_kwargs=OFFERED), ["a"], ["a"])
    assert scored.extra == {"address": ["127.0.0.1:1234"], "tokenizer": ["the-tokenizer"]}
    scored = score(load_custom_reward_fn(async_file, "any_kwargs", offered_kwargs=OFFERED), ["a"], ["a"])
    assert scored.extra == {"keys": ["reward_model_tokenizer,reward_router_address"]}


def test_a_function_gets_only_the_genrm_kwargs_it_names_and_is_told(async_file, caplog):
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        fn = load_custom_reward_fn(async_file, "address_only", {"bonus": 2}, offered_kwargs=OFFERED)
        assert fn("src", "a", "a") == {"score": 2.0, "address": "127.0.0.1:1234"}
        assert load_custom_reward_fn(async_file, "plain", offered_kwargs=OFFERED)("src", "a", "a") == 0.5
    told = [r.getMessage() for r in caplog.records if "does not take" in r.getMessage()]
    assert len(told) == 2 and "reward_model_tokenizer" in told[0] and "reward_router_address" not in told[0]
    assert "reward_model_tokenizer or reward_router_address" in told[1]
