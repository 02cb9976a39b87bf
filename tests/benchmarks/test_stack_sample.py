"""benchmarks/stack_sample.py on a small script: its samples land under the functions the script spent its time in,
busy or blocked, and the report groups them under a root frame."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import stack_sample  # noqa: E402

SCRIPT = """
import sys, time

def spin():
    end = time.perf_counter() + 0.4
    while time.perf_counter() < end:
        pass

def wait():
    time.sleep(0.4)

def work():
    spin()
    wait()

work()
print("argv", sys.argv[1:])
"""


def test_samples_land_under_the_functions_that_took_the_time(tmp_path, capsys):
    script, out = tmp_path / "probe.py", tmp_path / "stacks.json"
    script.write_text(SCRIPT)
    stack_sample.main(["--out", str(out), "--interval-ms", "2", "--", str(script), "--its-flag"])
    assert "argv ['--its-flag']" in capsys.readouterr().out
    data = json.loads(out.read_text())
    report = stack_sample.report(data, "probe.py:work", depth=1, top=10)
    assert set(report["seconds_by_frames_below_root"]) == {"probe.py:spin", "probe.py:wait"}
    assert {"probe.py:work", "probe.py:spin", "probe.py:wait"} <= set(report["seconds_inclusive"])
    assert "MainThread" in report["seconds_per_thread"]
    assert data["seconds_per_sample"] >= 0.002 and sum(r["samples"] for r in data["records"]) > 0
    assert stack_sample.report(data, "no such frame", depth=1, top=10)["seconds_inclusive"] == {}


def test_the_command_line_asks_for_one_thing_at_a_time():
    with pytest.raises(SystemExit):
        stack_sample.main([])
    with pytest.raises(SystemExit):
        stack_sample.main(["--report", "a.json", "--out", "b.json", "--", "x.py"])
