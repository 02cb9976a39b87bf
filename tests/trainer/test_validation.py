"""Validation metrics: verl's definitions (process_validation_metrics, its bootstrap, the core/aux split).

The reference below is verl's definition written the way verl's metric_utils.py runs it (Python loops, the
global numpy generator seeded per call, a dict of votes); the vectorised port must give the same numbers.
"""

from collections import defaultdict
from functools import partial

import numpy as np
import pytest

from hybridrl.trainer.validation import bootstrap_sizes, process_validation_metrics, validation_metrics


def reference_bootstrap(data, subset_size, reduce_fns, n_bootstrap=1000, seed=42):
    np.random.seed(seed)
    data_np = np.array(data, dtype=object)
    idxs = np.random.choice(len(data_np), size=(n_bootstrap, subset_size), replace=True)
    results = np.empty((len(reduce_fns), n_bootstrap), dtype=np.float64)
    for fn_idx, reduce_fn in enumerate(reduce_fns):
        for boot_idx in range(n_bootstrap):
            results[fn_idx, boot_idx] = reduce_fn(data_np[idxs[boot_idx]])
    return [(float(np.mean(results[i])), float(np.std(results[i]))) for i in range(len(reduce_fns))]


def reference_majority(data, vote_key, val_key):
    vote2vals = defaultdict(list)
    for d in data:
        vote2vals[d[vote_key]].append(d[val_key])
    counts = {k: len(v) for k, v in vote2vals.items()}
    return vote2vals[max(counts, key=counts.get)][0]


def reference_prompt_metrics(values, preds):
    n = len(values)
    metric = {f"mean@{n}": float(np.mean(values))}
    if n > 1:
        metric[f"std@{n}"] = float(np.std(values))
        for k in bootstrap_sizes(n):
            (bm, bs), (wm, ws) = reference_bootstrap(values, k, [np.max, np.min])
            metric.update({f"best@{k}/mean": bm, f"best@{k}/std": bs, f"worst@{k}/mean": wm, f"worst@{k}/std": ws})
            if preds is not None:
                votes = [{"val": v, "pred": p} for v, p in zip(values, preds)]
                [(mm, ms)] = reference_bootstrap(votes, k, [partial(reference_majority, vote_key="pred", val_key="val")])
                metric.update({f"maj@{k}/mean": mm, f"maj@{k}/std": ms})
    return metric


def test_bootstrap_sizes_are_powers_of_two_then_n():
    assert bootstrap_sizes(1) == [] and bootstrap_sizes(2) == [2]
    assert bootstrap_sizes(5) == [2, 4, 5] and bootstrap_sizes(8) == [2, 4, 8] and bootstrap_sizes(16) == [2, 4, 8, 16]


@pytest.mark.parametrize("num_samples", [2, 5, 8])
def test_per_prompt_metrics_equal_verls_bootstrap(num_samples):
    rng = np.random.default_rng(num_samples)
    values = rng.integers(0, 2, num_samples).astype(float).tolist()
    values[0] = 0.5  # a partial score, so best/worst/maj differ from an indicator's
    preds = rng.choice(["12", "7", "3"], num_samples).tolist()
    got = process_validation_metrics(["gsm8k"] * num_samples, ["p"] * num_samples,
                                     {"score": values, "pred": preds})["gsm8k"]["score"]
    want = reference_prompt_metrics(values, preds)
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_majority_ties_go_to_the_vote_seen_first_and_take_its_first_value():
    # two votes each for "a" and "b": resamples of 4 often tie; checked against the dict-of-votes reference
    values, preds = [1.0, 0.0, 0.25, 0.75], ["a", "b", "b", "a"]
    got = process_validation_metrics(["s"] * 4, ["p"] * 4, {"acc": values, "pred": preds})["s"]["acc"]
    assert got["maj@4/mean"] == pytest.approx(reference_prompt_metrics(values, preds)["maj@4/mean"], abs=1e-12)


def test_hand_values_means_stds_and_a_constant_prompt():
    # prompt p: (1, 0, 1, 1): mean 0.75, population std √(0.1875) = 0.433013; prompt q: (1, 1, 1, 1): every
    # resample's best, worst and majority is 1, std 0. Metrics average the prompts.
    metrics = process_validation_metrics(["s"] * 8, ["p"] * 4 + ["q"] * 4,
                                         {"acc": [1, 0, 1, 1, 1, 1, 1, 1], "pred": ["x"] * 8})["s"]["acc"]
    assert metrics["mean@4"] == pytest.approx((0.75 + 1) / 2)
    assert metrics["std@4"] == pytest.approx(0.1875**0.5 / 2)
    q_only = process_validation_metrics(["s"] * 4, ["q"] * 4, {"acc": [1] * 4, "pred": ["x"] * 4})["s"]["acc"]
    assert q_only["best@4/mean"] == q_only["worst@2/mean"] == q_only["maj@4/mean"] == 1.0
    assert q_only["best@4/std"] == 0.0


def test_core_and_aux_split_follows_verl():
    # acc exists, so it is the core variable; only its mean/best/maj metrics at the largest k (4) are core
    sources = ["openai/gsm8k"] * 4 + ["math"] * 2
    extra = {"acc": [True, False, True, True, 1.0, 0.0], "pred": ["4", "5", "4", "4", None, None],
             "note": ["ok"] * 6}
    metrics = validation_metrics(sources, ["u1"] * 4 + ["u2"] * 2, [1.0, 0.0, 1.0, 1.0, 0.5, 0.0], extra)
    core = sorted(key for key in metrics if key.startswith("val-core/"))
    assert core == ["val-core/math/acc/best@2/mean", "val-core/math/acc/best@2/std", "val-core/math/acc/maj@2/mean",
                    "val-core/math/acc/maj@2/std", "val-core/math/acc/mean@2",
                    "val-core/openai/gsm8k/acc/best@4/mean", "val-core/openai/gsm8k/acc/best@4/std",
                    "val-core/openai/gsm8k/acc/maj@4/mean", "val-core/openai/gsm8k/acc/maj@4/std",
                    "val-core/openai/gsm8k/acc/mean@4"]
    assert metrics["val-aux/openai/gsm8k/reward/mean@4"] == 0.75
    assert "val-aux/openai/gsm8k/acc/best@2/mean" in metrics and "val-aux/math/reward/std@2" in metrics
    assert not any("/note/" in key or "/pred/" in key for key in metrics)  # strings are not averaged


def test_without_acc_the_summed_score_is_core_and_one_sample_gives_mean_at_1():
    metrics = validation_metrics(["openai/gsm8k"] * 3, ["a", "b", "c"], [1.0, 0.0, 1.0], {})
    assert metrics == {"val-core/openai/gsm8k/reward/mean@1": pytest.approx(2 / 3)}


def test_numpy_global_generator_is_left_alone_and_misaligned_extras_are_refused():
    np.random.seed(7)
    expected_next = np.random.rand()
    np.random.seed(7)
    validation_metrics(["s"] * 4, ["p"] * 4, [1.0, 0.0, 1.0, 0.0], {})
    assert np.random.rand() == expected_next
    with pytest.raises(ValueError, match="'acc' has 2 entries for 4 scored rows"):
        validation_metrics(["s"] * 4, ["p"] * 4, [1.0, 0.0, 1.0, 0.0], {"acc": [1, 0]})
