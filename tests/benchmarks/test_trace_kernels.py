"""benchmarks/trace_kernels.py on hand-made chrome traces: kernels grouped by name without their template
arguments, and a rank's excess over 1/ranks of the one-process trace."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import trace_kernels  # noqa: E402


def write_trace(path: Path, kernels: list[tuple[str, float]]) -> str:
    events = [{"ph": "X", "cat": "kernel", "name": name, "pid": 1, "tid": 7, "ts": 1000 * i, "dur": dur}
              for i, (name, dur) in enumerate(kernels)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 9999})
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return str(path)


def test_kernel_group_drops_template_and_call_arguments():
    assert trace_kernels.kernel_group("void at::native::elementwise_kernel<128, 4, F>(int, F)") == \
        "at::native::elementwise_kernel"
    assert trace_kernels.kernel_group("nvjet_sm90_tst_256x160_64x4_1x2_h_bz_coopA_TNT") == \
        "nvjet_sm90_tst_256x160_64x4_1x2_h_bz_coopA_TNT"


def test_excess_of_a_rank_over_half_the_one_process_run(tmp_path, capsys):
    baseline = write_trace(tmp_path / "controller.update_actor.trace.json.gz",
                           [("gemm", 400), ("gemm", 400), ("void add<float>(float*)", 100)])
    rank = write_trace(tmp_path / "rank0.update_actor.trace.json.gz",
                       [("gemm", 410), ("void add<double>(double*)", 30), ("void add<float>(float*)", 40),
                        ("ncclDevKernel_AllGather_RING_LL", 90)])
    report = trace_kernels.main([rank, "--baseline", baseline, "--ranks", "2", "--top", "3"])
    assert json.loads(capsys.readouterr().out) == report
    assert report["kernel_ms"] == 0.57 and report["baseline_kernel_ms_per_rank"] == 0.45
    assert report["excess_kernel_ms"] == 0.12
    nccl, add, gemm = report["kernels"]
    assert nccl == {"kernel": "ncclDevKernel_AllGather_RING_LL", "ms": 0.09, "calls": 1, "mean_us": 90.0,
                    "baseline_ms_per_rank": 0.0, "excess_ms": 0.09}
    assert gemm["excess_ms"] == 0.01 and gemm["baseline_ms_per_rank"] == 0.4
    assert add == {"kernel": "add", "ms": 0.07, "calls": 2, "mean_us": 35.0, "baseline_ms_per_rank": 0.05,
                   "excess_ms": 0.02}
    assert report["least_excess"] == [gemm]  # scaled best


def test_without_a_baseline_the_kernels_are_listed_by_time(tmp_path):
    trace = write_trace(tmp_path / "rank0.gen.trace.json.gz", [("small", 5), ("big", 50), ("big", 50)])
    report = trace_kernels.compare(trace, top=5)
    assert report["kernel_ms"] == 0.105
    assert [(row["kernel"], row["calls"]) for row in report["kernels"]] == [("big", 2), ("small", 1)]
    assert "excess_ms" not in report["kernels"][0]
