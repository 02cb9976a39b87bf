"""benchmarks/weight_handoff_bench.py end to end at --quick size on CPU (real processes, both transports)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import weight_handoff_bench  # noqa: E402


@pytest.mark.slow  # benchmark plumbing: two worker groups (~20 s on 2 cores); the handoff is in tests/distributed
def test_quick_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "handoff.json"
    weight_handoff_bench.main(["--quick", "--steps", "2", "--modes", "pickle_fp32", "shared_memory",
                               "--out", str(out)])
    report = json.loads(capsys.readouterr().out)  # stdout is exactly one JSON object
    assert report == json.loads(out.read_text())
    fp32, shared = report["modes"]["pickle_fp32"], report["modes"]["shared_memory"]
    assert fp32["rollout_checksum_matches"] and shared["rollout_checksum_matches"]
    assert shared["shared_memory"] == 1.0 and fp32["shared_memory"] == 0.0
    padding_gb = 64e-9 * report["num_tensors"]  # each tensor starts on a 64-byte boundary in the buffer
    assert 2 * (shared["gb"] - padding_gb) <= fp32["gb"] <= 2 * shared["gb"]  # bf16: half the bytes
    assert len(shared["steps"]) == 2 and shared["speedup_vs_pickle_fp32"] > 0
