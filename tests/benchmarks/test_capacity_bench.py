"""The capacity search: doubling, prediction-guided jumps, bisection; what counts as a fit."""

import subprocess

from benchmarks.capacity_bench import judge, largest_fit, predicted_prompts


def fits_below(limit, calls):
    def fits(size):
        calls.append(size)
        return size <= limit
    return fits


def test_doubles_then_bisects_to_the_granularity():
    calls = []
    found = largest_fit(fits_below(300, calls), start=64, limit=4096, granularity=16)
    assert calls[:4] == [64, 128, 256, 512]  # doubling until the first out-of-memory
    assert found["largest_fit"] <= 300 < found["smallest_oom"] and found["smallest_oom"] - found["largest_fit"] <= 16
    assert found["stopped_by_error_at"] is None


def test_everything_fits_up_to_the_limit_and_nothing_fits():
    assert largest_fit(fits_below(10**6, []), 64, 1024, 16) == {
        "largest_fit": 1024, "smallest_oom": None, "stopped_by_error_at": None}
    assert largest_fit(fits_below(0, []), 64, 1024, 16)["largest_fit"] is None


def test_a_failure_that_is_not_out_of_memory_stops_the_search():
    def fits(size):
        return None if size == 256 else True
    assert largest_fit(fits, 64, 1024, 16) == {"largest_fit": 128, "smallest_oom": None, "stopped_by_error_at": 256}


def guess(value, after=128):
    """A predictor that knows nothing until the search has a fit at `after` or above (two fits)."""
    return lambda size: value if size >= after else None


def test_a_good_prediction_settles_the_search_after_two_fits():
    calls = []
    found = largest_fit(fits_below(700, calls), 64, 1024, 16, predict=guess(700))
    assert calls == [64, 128, 688, 704] and found["largest_fit"] == 688 and found["smallest_oom"] == 704


def test_a_prediction_too_high_bisects_and_one_too_low_gallops():
    calls = []
    found = largest_fit(fits_below(300, calls), 64, 1024, 16, predict=guess(900))
    assert calls[:3] == [64, 128, 896] and found["largest_fit"] <= 300 < found["smallest_oom"]
    assert found["smallest_oom"] - found["largest_fit"] <= 16
    calls = []
    found = largest_fit(fits_below(300, calls), 64, 1024, 16, predict=guess(150))
    assert calls[:5] == [64, 128, 144, 160, 192]  # the prediction, then steps of 16, 32, 64, ...
    assert found["largest_fit"] <= 300 < found["smallest_oom"] and found["smallest_oom"] - found["largest_fit"] <= 16


def trial(sequences, kv_during_training, phase_peaks, kv_per_sequence=1 / 64, budget=120.0, used_fraction=1.0):
    kv = min(sequences * kv_per_sequence, budget)  # the engine caps its cache at the budget
    return {"sequences": sequences, "kv_cache_gb": kv, "kv_budget_gb": budget, "device_total_gb": 100.0,
            "kv_during_training": kv_during_training, "kv_peak_usage": sequences * kv_per_sequence * used_fraction / kv,
            "phase_peaks_gb": {phase: peak + (kv if kv_during_training or phase == "gen" else 0.0)
                               for phase, peak in phase_peaks.items()}}


def test_prediction_plans_the_kv_cache_beside_the_modes_non_kv_peak():
    hybrid = [trial(s, False, {"gen": 4.0, "update_actor": 20.0}) for s in (512, 1024)]
    # hybrid: the cache lives during gen only, beside 4 GB: (98 - 4) GB at 1/64 GB per sequence, 8 per prompt
    assert predicted_prompts(hybrid, n=8) == int(94.0 * 64 // 8)
    separate = [trial(s, True, {"gen": 4.0, "update_actor": 20.0}) for s in (512, 1024)]
    assert predicted_prompts(separate, n=8) == int(78.0 * 64 // 8)  # the cache stays beside training's 20 GB
    assert predicted_prompts(hybrid[:1], n=8) is None  # one fit: no lines yet
    assert predicted_prompts([dict(t, device_total_gb=None) for t in hybrid], n=8) is None  # CPU trials
    assert predicted_prompts([dict(t, kv_peak_usage=None) for t in hybrid], n=8) is None  # no usage figure


def test_prediction_follows_peaks_that_grow_with_the_batch_and_the_latest_budget():
    # the gen activations grow 1/256 GB per sequence beside the cache: (98 - 4) / (1/64 + 1/256)
    growing = [dict(trial(s, False, {"gen": 4.0 + s / 256}), sequences=s) for s in (512, 1024)]
    assert predicted_prompts(growing, n=8) == int(94.0 / (1 / 64 + 1 / 256) // 8)
    # a 50 GB budget binds before the device; the larger trial's figure counts (no extrapolated line)
    tight = [trial(512, False, {"gen": 4.0}, budget=53.0), trial(1024, False, {"gen": 4.0}, budget=50.0)]
    assert predicted_prompts(tight, n=8) == int(50.0 * 64 // 8)


def test_a_cache_capped_at_the_budget_is_filled_by_the_blocks_in_use():
    """Prompt blocks shared by the n samples: 3/4 of the reserved size is in use. With the cache capped at a
    60 GB budget, preemption comes at 60 GB of blocks in use: 60 / (3/4 * 1/64) sequences."""
    capped = [trial(s, False, {"gen": 4.0}, budget=60.0, used_fraction=0.75) for s in (4096, 4608)]
    assert capped[-1]["kv_cache_gb"] == 60.0  # the allocation no longer shows the per-sequence size
    assert predicted_prompts(capped, n=8) == int(60.0 / (0.75 / 64) // 8)
    # separate mode: the capped cache (60 GB) beside training's peak, 33 GB + 1/1024 GB per sequence, reaches
    # the device at 5,120 sequences, before the blocks in use (half the reservation) reach the budget at 7,680
    separate = [trial(s, True, {"update_actor": 33.0 + s / 1024}, budget=60.0, used_fraction=0.5)
                for s in (4096, 4352)]
    assert predicted_prompts(separate, n=8) == int((98.0 - 60.0 - 33.0) * 1024 // 8)


def test_a_preempted_step_is_not_a_fit_and_an_oom_is_recognized():
    done = subprocess.CompletedProcess([], 0, "", "")
    assert judge(done, {"step_s": 1.0, "rollout/num_preempted": 0.0}) == (True, "fit")
    assert judge(done, {"step_s": 1.0, "rollout/num_preempted": 3.0})[0] is False
    oom = subprocess.CompletedProcess([], 1, "", "hybridrl: CUDA out of memory in phase 'update_actor'")
    assert judge(oom, {}) == (False, "out of memory")
    assert judge(subprocess.CompletedProcess([], 1, "", "KeyError: 'x'"), {}) == (None, "error")
