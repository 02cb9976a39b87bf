"""The capacity search: doubling then bisection, and errors that are not out-of-memory stop it."""

from benchmarks.capacity_bench import largest_fit


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
