"""benchmarks/scaling_summary.py on real rl_step_bench.py reports (--quick, CPU), and two_gpu_suite.sh as a dry run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import rl_step_bench, scaling_summary  # noqa: E402


def rl_step_report(path: Path, *args: str) -> str:
    rl_step_bench.main(["--quick", "--only", "hybrid", "--steps", "3", "--warmup-steps", "1", "--workdir",
                        str(path.parent), "--out", str(path), *args])
    return str(path)


def edited(base: str, path: Path, edit) -> str:
    """A copy of the report at `base` with `edit(report)` applied: another run without running it."""
    report = json.loads(Path(base).read_text())
    edit(report)
    path.write_text(json.dumps(report))
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    return rl_step_report(tmp_path_factory.mktemp("scaling") / "g1.json")


def twice_as_fast(report: dict) -> None:
    run = report["hybridrl"]["hybrid"]
    run["tokens_per_s_median"] *= 2
    run["timing_s/update_actor"] /= 2


@pytest.mark.slow
def test_speedup_efficiency_and_phases_come_from_the_median_steps(base, tmp_path, capsys):
    fast = edited(base, tmp_path / "fast.json", twice_as_fast)
    capsys.readouterr()
    out = tmp_path / "scaling.json"
    summary = scaling_summary.main(["--base", base, "--gpus", "2", f"fast={fast}", f"again={base}",
                                    "--out", str(out)])
    assert json.loads(capsys.readouterr().out) == json.loads(out.read_text()) == summary
    report = json.loads(Path(base).read_text())["hybridrl"]["hybrid"]
    fast_run, again = summary["runs"]["fast"], summary["runs"]["again"]
    assert summary["base"]["tokens_per_s_median"] == report["tokens_per_s_median"]
    assert fast_run["speedup"] == pytest.approx(2.0) and fast_run["scaling_efficiency"] == pytest.approx(1.0)
    assert fast_run["reaches_target"] and not again["reaches_target"] and again["speedup"] == 1.0
    update = report["timing_s/update_actor"]
    assert fast_run["phases_s"]["update_actor"] == {"run": pytest.approx(update / 2), "base": update}
    assert summary["workload"]["tokens_per_step"] == report["tokens_per_step"] > 0


def test_runs_of_another_workload_or_no_hybrid_run_are_refused(base, tmp_path):
    fewer = edited(base, tmp_path / "fewer.json", lambda report: report["workload"].update(num_prompts=2))
    with pytest.raises(ValueError, match=r"fewer\.json ran .* but the base .*g1\.json ran .*same --num-prompts"):
        scaling_summary.main(["--base", base, f"fewer={fewer}"])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"workload": {}, "trl": {}}))
    with pytest.raises(ValueError, match="not an rl_step_bench.py report with a hybrid run"):
        scaling_summary.main(["--base", base, f"other={other}"])
    with pytest.raises(SystemExit):
        scaling_summary.main(["--base", base, "no-equals-sign"])


@pytest.mark.slow  # the whole suite at toy size: five runs, three of them on two CPU processes (~70 s on 2 cores)
def test_two_gpu_suite_dry_run_on_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path),
           "EXTRA": "--quick --device cpu --hybridrl-override actor_rollout_ref.rollout.name=hybrid"}
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "two_gpu_suite.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for name in ("g1", "g2_replicas", "g2_fsdp", "g2_tp2", "split"):
        assert f"{name}: ok" in done.stdout, done.stdout
    summary = json.loads((tmp_path / "scaling.json").read_text())
    assert set(summary["runs"]) == {"g2_replicas", "g2_fsdp", "g2_tp2"}
