"""trainer.log_val_generations: verl's choice of samples, and what the console, the file and the trackers get."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import pytest

from hybridrl.logging.tracker import build_trackers
from hybridrl.logging.val_generations import (CONSOLE_TEXT_LIMIT, format_generations, log_val_generations,
                                              select_val_generations)

INPUTS = ["e", "a", "d", "b", "f", "c"]


def test_samples_are_verl_choice_sorted_then_shuffled_with_seed_42():
    outputs = [f"out-{i}" for i in INPUTS]
    scores = [float(i) for i in range(6)]
    chosen = select_val_generations(INPUTS, outputs, scores, 3)
    # sorted inputs a..f, then np.random.RandomState(42).shuffle(list(range(6))) == [0, 1, 5, 2, 4, 3]
    assert [sample[0] for sample in chosen] == ["a", "b", "f"]
    assert chosen[0] == ("a", "out-a", 1.0)
    reordered = select_val_generations(INPUTS[::-1], outputs[::-1], scores[::-1], 3)
    assert reordered == chosen  # the same prompts at every validation, whatever the batch order
    assert len(select_val_generations(INPUTS, outputs, scores, 100)) == 6
    with pytest.raises(ValueError, match="one input, output and score"):
        select_val_generations(INPUTS, outputs[:2], scores, 3)


def test_console_block_shortens_long_text_and_says_so():
    long = "x" * (CONSOLE_TEXT_LIMIT + 7)
    block = format_generations([("2+2=", long, 1.0)], step=5)
    assert block.startswith("validation generations at step 5 (1 samples")
    assert "input:  2+2=" in block and "(+7 characters; whole in the trackers)" in block


def test_console_and_file_trackers_get_the_samples(tmp_path, capsys):
    trackers = build_trackers(["console", "file"], project_name="p", experiment_name="e", local_dir=str(tmp_path),
                              config_dict={})
    assert log_val_generations(trackers, 0, INPUTS, INPUTS, [0.0] * 6, step=3) == []  # 0: off
    chosen = log_val_generations(trackers, 2, INPUTS, [i.upper() for i in INPUTS], [0.5] * 6, step=3)
    trackers.finish()
    assert "validation generations at step 3 (2 samples" in capsys.readouterr().out
    records = [json.loads(line) for line in open(tmp_path / "val_generations.jsonl", encoding="utf-8")]
    assert records == [{"step": 3, "input": i, "output": o, "score": s} for i, o, s in chosen]


def _module(name: str, calls: list, **attributes) -> types.ModuleType:
    """A stand-in package (wandb/mlflow/swanlab are not test dependencies): functions record their calls."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for function in ("init", "log", "finish", "set_experiment", "start_run", "log_params", "log_metrics",
                     "end_run", "login"):
        setattr(module, function, lambda *args, _f=function, **kwargs: calls.append((_f, args, kwargs)))
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


class _Table:
    def __init__(self, columns=None, data=None):
        self.columns, self.data, self.added = columns, data, []

    def add(self, headers, rows):
        self.added.append((headers, rows))


def test_wandb_gets_verl_table_of_every_validation(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _module("wandb", calls, Table=_Table))
    trackers = build_trackers(["wandb"], project_name="p", experiment_name="e", local_dir=str(tmp_path), config_dict={})
    trackers.log_generations([("1+1=", "2", 1.0)], step=4)
    trackers.log_generations([("1+1=", "3", 0.0)], step=8)
    table = calls[-1][1][0]["val/generations"]  # log({"val/generations": table}, step=8)
    assert table.columns == ["step", "input_1", "output_1", "score_1"]
    assert table.data == [[4, "1+1=", "2", 1.0], [8, "1+1=", "3", 0.0]] and calls[-1][2] == {"step": 8}


def test_mlflow_gets_a_json_artifact(monkeypatch, tmp_path):
    calls: list = []
    artifacts: list = []
    monkeypatch.setitem(sys.modules, "mlflow", _module(
        "mlflow", calls, log_artifact=lambda path: artifacts.append((path, json.load(open(path))))))
    trackers = build_trackers(["mlflow"], project_name="p", experiment_name="e", local_dir=str(tmp_path), config_dict={})
    trackers.log_generations([("1+1=", "2", 1.0)], step=4)
    assert artifacts[0][0].endswith("val_step4.json")
    assert artifacts[0][1] == [{"input": "1+1=", "output": "2", "score": 1.0}]


def test_swanlab_gets_a_table(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setitem(sys.modules, "swanlab", _module("swanlab", calls, echarts=types.SimpleNamespace(Table=_Table)))
    trackers = build_trackers(["swanlab"], project_name="p", experiment_name="e", local_dir=str(tmp_path),
                              config_dict={})
    trackers.log_generations([("1+1=", "2", 1.0)], step=4)
    table = calls[-1][1][0]["val/generations"]
    assert table.added == [(["step", "input", "output", "score"], [[4, "1+1=", "2", 1.0]])]


def test_validation_dump_writes_every_sample_with_ground_truth_and_extras(tmp_path, capsys):
    from hybridrl.logging.val_generations import record_validation_samples, wants_validation_texts

    settings = types.SimpleNamespace(log_val_generations=0, validation_data_dir=str(tmp_path / "val"))
    assert wants_validation_texts(settings)
    trackers = build_trackers(["console"], project_name="p", experiment_name="e", local_dir=str(tmp_path),
                              config_dict={})
    texts = {"inputs": ["1+1=", "2+2="], "outputs": ["2", "5"], "gts": ["2", "4"]}
    record_validation_samples(trackers, settings, texts, [1.0, 0.0], {"acc": [1, 0], "score": [9, 9]}, step=6)
    assert capsys.readouterr().out == ""  # log_val_generations=0: nothing on the console
    records = [json.loads(line) for line in open(tmp_path / "val" / "6.jsonl", encoding="utf-8")]
    assert records == [{"input": "1+1=", "output": "2", "score": 1.0, "step": 6, "gts": "2", "acc": 1},
                       {"input": "2+2=", "output": "5", "score": 0.0, "step": 6, "gts": "4", "acc": 0}]
    assert not wants_validation_texts(types.SimpleNamespace(log_val_generations=0, validation_data_dir=None))
