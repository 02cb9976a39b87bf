"""benchmarks/trace_gaps.py on a small hand-made chrome trace: busy time is the union over streams, gaps are
found between and around it, and each gap names the host work inside it."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import trace_gaps  # noqa: E402


def write_trace(path: Path) -> None:
    def event(cat, name, ts, dur, tid=1):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    events = [
        event("cpu_op", "aten::mm", 0, 50),
        event("kernel", "gemm", 10, 100, tid=7),
        event("kernel", "ncclDevKernel_AllGather", 50, 100, tid=20),  # overlaps the gemm: counted once
        event("cuda_runtime", "cudaStreamSynchronize", 160, 500),  # the host waits: the device idles
        event("cpu_op", "aten::copy_", 600, 30),
        event("kernel", "gemm", 700, 100, tid=7),
        event("cpu_op", "aten::item", 800, 1500),  # after the last kernel: a trailing gap
        {"ph": "i", "name": "marker", "ts": 5},  # not a complete event: ignored
    ]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_busy_idle_and_gaps_of_a_hand_made_trace(tmp_path, capsys):
    trace = tmp_path / "rank0.update_actor.trace.json.gz"
    write_trace(trace)
    report = trace_gaps.main([str(trace), "--top", "2"])[str(trace)]
    assert json.loads(capsys.readouterr().out) == {str(trace): report}
    assert report["window_ms"] == 2.3 and report["device_busy_ms"] == 0.24  # [10, 150) and [700, 800)
    assert report["device_idle_ms"] == 2.06
    assert report["kernel_ms_by_stream"] == {"7": 0.2, "20": 0.1} and report["nccl_kernel_ms"] == 0.1
    assert report["idle_ms_by_gap_size"] == {"<20us": 0.01, "20-100us": 0.0, "0.1-1ms": 0.55, ">1ms": 1.5}
    trailing, waiting = report["largest_gaps"]
    assert trailing == {"ms": 1.5, "at_ms": 0.8, "spanning": ["aten::item"], "host_inside_ms": {"aten::item": 1.5}}
    assert waiting["ms"] == 0.55 and waiting["at_ms"] == 0.15
    assert waiting["spanning"] == ["cudaStreamSynchronize"]
    assert waiting["host_inside_ms"] == {"cudaStreamSynchronize": 0.5, "aten::copy_": 0.03}


def test_a_trace_without_device_events_says_so(tmp_path):
    trace = tmp_path / "controller.gen.trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]}))
    assert "no device events" in trace_gaps.summarize(str(trace))["error"]
