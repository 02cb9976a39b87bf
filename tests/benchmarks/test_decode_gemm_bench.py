"""benchmarks/decode_gemm_bench.py: its shapes are the model's GEMMs, and a --quick CPU run times each one."""

from __future__ import annotations

import sys

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import decode_gemm_bench  # noqa: E402
from benchmarks.common import build_random_model, qwen2_config  # noqa: E402


def test_shapes_are_the_decoder_layers_and_head_linears():
    import torch

    model = build_random_model(qwen2_config(quick=True), torch.float32, "cpu")
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    linears = {"qkv": [attn.q_proj, attn.k_proj, attn.v_proj], "o": [attn.o_proj],
               "gate_up": [mlp.gate_proj, mlp.up_proj], "down": [mlp.down_proj], "lm_head": [model.lm_head]}
    want = {name: (mods[0].in_features, sum(m.out_features for m in mods)) for name, mods in linears.items()}
    assert decode_gemm_bench.gemm_shapes(quick=True) == want


def test_quick_run_times_every_gemm_at_every_row_count(tmp_path, capsys):
    report = quick_report(decode_gemm_bench.main, tmp_path / "decode_gemm.json", capsys, "--rows", "2,4")
    times = report["us_per_call"]["cpu"]
    assert set(times) == {f"{rows} {name}" for rows in (2, 4) for name in report["shapes"]}
    assert all(case["linear"] > 0 and case["transposed"] > 0 for case in times.values())
