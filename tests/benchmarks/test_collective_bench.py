"""benchmarks/collective_bench.py: its sizes are the model's, and a --quick run on 2 gloo CPU ranks reports them."""

from __future__ import annotations

import sys

import pytest

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import collective_bench  # noqa: E402
from benchmarks.common import build_random_model, qwen2_config  # noqa: E402


def test_sizes_are_one_decoder_layer_and_the_whole_model():
    import torch

    model = build_random_model(qwen2_config(quick=True), torch.float32, "cpu")
    sizes = collective_bench.step_sizes(quick=True)
    assert sizes["layer"] == sum(p.numel() for p in model.model.layers[0].parameters())
    assert sizes["model"] == sum(p.numel() for p in model.parameters())  # tied embeddings counted once


@pytest.mark.slow  # benchmark plumbing: a 2-rank gloo group (~11 s on 2 cores)
def test_quick_run_times_every_collective(tmp_path, capsys):
    report = quick_report(collective_bench.main, tmp_path / "collectives.json", capsys, "--iters", "2")
    assert report["backend"] == "gloo" and "contention" not in report
    assert set(report["collectives"]) == {"all_gather_layer_bf16", "all_gather_model_bf16",
                                          "reduce_scatter_layer_fp32", "all_reduce_layer_fp32"}
    for case in report["collectives"].values():
        assert case["ms"] > 0 and case["bus_gb_s"] > 0
