"""Remote trackers' wiring, checked against stand-in modules that record their calls (no server or account)."""

from __future__ import annotations

import importlib.machinery
import sys
import types

from hybridrl.logging.backends import sanitize_mlflow_key
from hybridrl.logging.tracker import build_trackers


def _fake_module(name: str, calls: list, functions: list[str]) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)  # find_spec() reads it for modules in sys.modules
    for function in functions:
        setattr(module, function, lambda *args, _f=function, **kwargs: calls.append((_f, args, kwargs)))
    return module


def test_wandb_tracker_inits_logs_and_finishes(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_module("wandb", calls, ["init", "log", "finish"]))
    tracker = build_trackers(["wandb"], project_name="proj", experiment_name="exp", local_dir=str(tmp_path),
                             config_dict={"trainer": {"total_epochs": 1}})
    tracker.log({"critic/score/mean": 0.5}, step=3)
    tracker.finish()
    assert calls == [("init", (), {"project": "proj", "name": "exp", "config": {"trainer": {"total_epochs": 1}}}),
                     ("log", (), {"data": {"critic/score/mean": 0.5}, "step": 3}),
                     ("finish", (), {"exit_code": 0})]


def test_mlflow_tracker_flattens_params_and_sanitizes_keys(monkeypatch, tmp_path):
    calls: list = []
    functions = ["set_experiment", "start_run", "log_params", "log_metrics", "end_run"]
    monkeypatch.setitem(sys.modules, "mlflow", _fake_module("mlflow", calls, functions))
    tracker = build_trackers("mlflow", project_name="proj", experiment_name="exp", local_dir=str(tmp_path),
                             config_dict={"data": {"train_batch_size": 8}})
    tracker.log({"val-core/openai/gsm8k/reward/mean@1": 0.25}, step=2)
    tracker.finish()
    assert ("log_params", ({"data.train_batch_size": 8},), {}) in calls
    assert ("log_metrics", ({"val-core/openai/gsm8k/reward/mean_at_1": 0.25},), {"step": 2}) in calls
    assert calls[-1][0] == "end_run"


def test_sanitize_mlflow_key_keeps_allowed_characters():
    assert sanitize_mlflow_key("timing_s/gen") == "timing_s/gen"
    assert sanitize_mlflow_key("a(b)") == "a_b_"


def test_trace_backend_mlflow_without_mlflow_names_the_install(monkeypatch):
    import pytest

    from hybridrl.logging.backends import MissingDependencyError, check_trace_backend_available

    monkeypatch.setitem(sys.modules, "mlflow", None)  # find_spec() answers None: not installed
    with pytest.raises(MissingDependencyError, match=r"trace.backend=mlflow .*pip install 'hybridrl\[mlflow\]'"):
        check_trace_backend_available("mlflow")
    check_trace_backend_available(None)  # tracing off: nothing needed
