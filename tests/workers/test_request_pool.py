"""The request pool of a rollout rank (asynchronous training): groups keyed like a batch call's rows, parked
(aborted, tokens kept) through a weight sync, resumed exactly, with the policy versions of their tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hybridrl.rollout.base import SamplingParams
from hybridrl.workers.request_pool import GroupRequest, RequestPool
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model

GREEDY = SamplingParams(do_sample=False, max_new_tokens=20, ignore_eos=True)
SAMPLED = SamplingParams(temperature=0.9, max_new_tokens=20, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    return make_model("qwen2", seed=4)


def groups(seed: int, n: int) -> list[GroupRequest]:
    """One group per prompt, rows numbered as one batch call of all prompts with n samples each."""
    return [GroupRequest(f"g{i}", PROMPTS[i], n, seed, row_offset=i * n) for i in range(len(PROMPTS))]


def advance_until_done(pool: RequestPool, version: int, max_steps: int = 1) -> dict:
    done = {}
    while pool.num_in_flight:
        done.update({g.group_id: g for g in pool.advance(max_steps, version)})
    return done


def started_pool(model, params: SamplingParams):
    """An engine (decode bursts of 4) and a pool running every prompt's group of two samples (seed 3)."""
    engine = make_engine(model, max_decode_burst=4)
    pool = RequestPool(engine)
    pool.submit(groups(3, 2), params, version=0)
    return engine, pool


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "seeded_sampling"])
def test_groups_sample_the_batch_calls_rows(model, params):
    """Group i's sample j is row i*n + j of a batch call of every prompt with the same seed."""
    want = make_engine(model).generate(PROMPTS, replace(params, n=2, seed=5))
    pool = RequestPool(make_engine(model, max_decode_burst=4))
    pool.submit(groups(5, 2), params, version=0)
    got = advance_until_done(pool, version=0)
    for i in range(len(PROMPTS)):
        assert got[f"g{i}"].token_ids == want.token_ids[2 * i:2 * i + 2]
        torch.testing.assert_close(torch.tensor(sum(got[f"g{i}"].log_probs, [])),
                                   torch.tensor(sum(want.log_probs[2 * i:2 * i + 2], [])), atol=1e-5, rtol=0)
        assert got[f"g{i}"].min_versions == got[f"g{i}"].max_versions == [0, 0]


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "seeded_sampling"])
@pytest.mark.parametrize("steps_before_park", [1, 3])
def test_parked_groups_resume_through_a_weight_sync_as_if_never_interrupted(model, params, steps_before_park):
    """The colocate_async cycle: park mid-decode (tokens kept), sleep, load the (same) weights, wake, resume:
    every sample continues exactly, and records that versions 0 and 1 produced its tokens."""
    want = advance_until_done(started_pool(model, params)[1], version=0)
    engine, pool = started_pool(model, params)
    assert pool.advance(steps_before_park, version=0) == []  # prefill, then bursts of 4 tokens: none done
    assert pool.park() == 6 and not engine.has_unfinished_requests()
    kept = {f"g{i}/{j}": list(s.token_ids) for i in range(3) for j, s in enumerate(pool.groups[f"g{i}"])}
    assert all(len(tokens) < 20 for tokens in kept.values()) and any(kept.values())
    engine.sleep()
    engine.update_weights(model.named_parameters())
    engine.wake_up()
    got = advance_until_done(pool, version=1)
    for group_id, group in want.items():
        assert got[group_id].token_ids == group.token_ids
        torch.testing.assert_close(torch.tensor(sum(got[group_id].log_probs, [])),
                                   torch.tensor(sum(group.log_probs, [])), atol=1e-5, rtol=0)
        for j in range(2):
            before = kept[f"{group_id}/{j}"]
            assert got[group_id].token_ids[j][:len(before)] == before  # the kept tokens, unchanged
            assert got[group_id].num_resumes[j] == 1
            assert (got[group_id].min_versions[j], got[group_id].max_versions[j]) == ((0 if before else 1), 1)


def test_changed_weights_continue_from_the_kept_tokens(model):
    """New weights after the park: the kept prefix stays, the rest is the new policy's (greedy), and the
    log-probs of the kept tokens are those the old policy gave them."""
    params = GREEDY
    other = make_model("qwen2", seed=9)
    engine = make_engine(model, max_decode_burst=4)
    pool = RequestPool(engine)
    pool.submit(groups(0, 1)[:1], params, version=0)
    pool.advance(2, version=0)
    pool.park()
    sample = pool.groups["g0"][0]
    prefix, prefix_lp = list(sample.token_ids), list(sample.log_probs)
    engine.update_weights(other.named_parameters())
    got = advance_until_done(pool, version=1)["g0"]
    fresh = make_engine(other).generate([PROMPTS[0] + prefix], replace(params, max_new_tokens=20 - len(prefix)))
    assert got.token_ids[0] == prefix + fresh.token_ids[0] and got.log_probs[0][:len(prefix)] == prefix_lp
    assert (got.min_versions[0], got.max_versions[0]) == (0, 1)


def park_and_resume(model, new_weights, *, recompute: bool) -> tuple[dict, dict, dict]:
    """Two groups of two sampled responses parked after three steps, the engine given `new_weights` without
    sleeping (the kept-KV cycle), then resumed: what each group kept, what it finished with, and the engine's
    metrics of the resume."""
    engine = make_engine(model, max_decode_burst=4, recompute_kv_after_weight_updates=recompute)
    pool = RequestPool(engine)
    pool.submit(groups(3, 2)[:2], SAMPLED, version=0)
    pool.advance(3, version=0)
    pool.park()
    kept = {g: [list(s.token_ids) for s in samples] for g, samples in pool.groups.items()}
    engine.take_metrics()
    engine.update_weights(new_weights.named_parameters())
    return kept, advance_until_done(pool, version=1), engine.take_metrics()


def test_kept_kv_resumes_from_the_cache_without_re_prefilling(model):
    """recompute_kv_after_weight_updates=False: the resumed requests find their aborted selves' full blocks in
    the prefix cache (only the tail past the last full block is prefilled), and with unchanged weights they
    continue exactly as if never interrupted; the default rebuilds every kept token by prefill."""
    kept, got, metrics = park_and_resume(model, model, recompute=False)
    _, rebuilt, rebuilt_metrics = park_and_resume(model, model, recompute=True)
    written = sum((len(PROMPTS[int(g[1:])]) + len(t) - 1) // 4 * 4 for g, ts in kept.items() for t in ts)
    assert metrics["rollout/prefix_cache_hit_tokens"] >= written > 0
    assert metrics["rollout/prefill_tokens"] <= 4 * 4  # at most a block's worth per sample of four
    generated = sum(len(t) for ts in kept.values() for t in ts)
    assert rebuilt_metrics["rollout/prefill_tokens"] >= generated > metrics["rollout/prefill_tokens"]
    assert {g: r.token_ids for g, r in got.items()} == {g: r.token_ids for g, r in rebuilt.items()}


def test_kept_kv_after_new_weights_is_the_old_policys(model):
    """New weights with kept KV: the kept tokens' KV is still the old policy's, so the resumed tokens'
    log-probs differ from those of the same tokens with KV rebuilt by the new weights."""
    other = make_model("qwen2", seed=9)
    kept, got, _ = park_and_resume(model, other, recompute=False)
    _, rebuilt, _ = park_and_resume(model, other, recompute=True)
    for group_id, samples in kept.items():
        for j, before in enumerate(samples):
            assert got[group_id].token_ids[j][:len(before)] == before
            assert rebuilt[group_id].token_ids[j][:len(before)] == before
    first_resumed = [(got[g].log_probs[j][len(t)], rebuilt[g].log_probs[j][len(t)])
                     for g, ts in kept.items() for j, t in enumerate(ts)]
    assert all(abs(stale - fresh) > 1e-4 for stale, fresh in first_resumed)


def test_pool_refuses_a_group_twice_and_forgets_everything(model):
    engine = make_engine(model)
    pool = RequestPool(engine)
    pool.submit(groups(0, 1)[:1], GREEDY, version=0)
    with pytest.raises(ValueError, match="already in this rollout replica's pool"):
        pool.submit(groups(0, 1)[:1], GREEDY, version=0)
    pool.advance(1, version=0)
    pool.forget()
    assert pool.num_in_flight == 0 and not engine.has_unfinished_requests() and pool.groups == {}


@pytest.mark.parametrize("parked", [False, True], ids=["running", "parked"])
def test_forgetting_some_groups_aborts_only_theirs(model, parked):
    """`drop` evicts groups mid-generation: their requests leave the engine (running or parked), unknown ids are
    skipped, and the other groups finish exactly as they would have."""
    want = advance_until_done(started_pool(model, GREEDY)[1], version=0)
    engine, pool = started_pool(model, GREEDY)
    pool.advance(2, version=0)
    if parked:
        pool.park()
    pool.forget(["g1", "not-here"])
    assert "g1" not in pool.groups and all(s.group_id != "g1" for s in [*pool.running.values(), *pool.parked])
    assert pool.num_in_flight == 2 * (len(PROMPTS) - 1)
    assert engine.has_unfinished_requests() is not parked
    got = advance_until_done(pool, version=0)
    assert {g: r.token_ids for g, r in got.items()} == {g: r.token_ids for g, r in want.items() if g != "g1"}
    assert not engine.has_unfinished_requests()
