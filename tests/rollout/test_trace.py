"""Rollout tracing into a real MLflow tracking store (a file store in a temp dir): one trace per traced
trajectory, its spans in turn order with verl's tags, the per-step sample cap, and the refusals."""

from __future__ import annotations

import sys

import pytest

from hybridrl.config import ConfigError
from hybridrl.logging.backends import MissingDependencyError
from hybridrl.rollout.agent import AgentLoopManager
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.trace import RolloutTracer, TraceSettings, build_trace_backend, trace_span
from hybridrl.utils.batch import Batch
from tests.rollout.agent.helpers import ScriptedEngine, rollout_config, tool_call

CALCULATOR = "hybridrl.rollout.tools.builtin.calculator"
QUESTION = [{"role": "user", "content": "What is 2+3?"}]
TURN0, TURN1 = tool_call("calculator", expression="2+3") + "<|im_end|>", "#### 5<|im_end|>"


@pytest.fixture(scope="module")
def chatml_tokenizer():
    from hybridrl.models.tiny import build_char_tokenizer

    return build_char_tokenizer(chat_format="chatml")


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this switch
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # no export thread left running at pytest's exit
    yield mlflow
    mlflow.flush_trace_async_logging()


def traced_run(tokenizer, tmp_path, rows=2, n=1, cap=None, interaction=False, step=3):
    config = rollout_config(function_tool_path=CALCULATOR, default_agent_loop="tool_agent")
    config.trace.backend, config.trace.token2text = "mlflow", True
    config.trace.max_samples_per_step_per_worker = cap
    config.trace.project_name, config.trace.experiment_name = "trace_test", "exp1"
    extra = [{"index": 10 + i} for i in range(rows)]
    if interaction:
        path = tmp_path / "interaction.yaml"
        path.write_text("interaction:\n  - {name: gsm8k, class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction}\n")
        config.multi_turn.interaction_config_path = str(path)
        extra = [{**info, "interaction_kwargs": {"name": "gsm8k", "ground_truth": "5"}} for info in extra]
    engine = ScriptedEngine(tokenizer, lambda text, turn: TURN0 if turn == 0 else TURN1)
    manager = AgentLoopManager(engine, tokenizer, config, model_type="qwen2")
    prompts = Batch(non_tensors={"raw_prompt": [QUESTION] * rows, "extra_info": extra}, meta={"global_steps": step})
    manager.generate_sequences(prompts, SamplingParams(n=n, do_sample=False))
    manager.close()  # flushes the asynchronous trace export
    return manager


def traces(mlflow) -> list:
    experiment = mlflow.get_experiment_by_name("trace_test")
    found = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    return sorted(found, key=lambda trace: (trace.info.tags["sample_index"], trace.info.tags["rollout_n"]))


def ordered_spans(trace) -> list:
    return sorted(trace.data.spans, key=lambda span: span.start_time_ns)


def test_each_trajectory_is_one_trace_with_its_turns_in_order(chatml_tokenizer, tmp_path, mlflow_store):
    traced_run(chatml_tokenizer, tmp_path)
    found = traces(mlflow_store)
    assert len(found) == 2
    for sample_index, trace in zip(("10", "11"), found):
        tags = trace.info.tags
        assert (tags["step"], tags["sample_index"], tags["rollout_n"], tags["validate"], tags["experiment_name"]) == (
            "3", sample_index, "0", "False", "exp1")
        spans = ordered_spans(trace)
        assert [span.name for span in spans] == ["agent_loop", "generate", "tool:calculator", "generate"]
        root = spans[0]
        assert root.parent_id is None and all(span.parent_id == root.span_id for span in spans[1:])
        assert root.inputs["raw_prompt"] == QUESTION
        assert root.outputs["num_turns"] == 4 and root.outputs["response_text"].endswith(TURN1)
        first, tool, second = spans[1:]
        assert first.outputs["text"] == TURN0 and first.outputs["stop_reason"] == "stop"
        assert first.inputs["text"].endswith("<|im_start|>assistant\n")  # token2text: the decoded prompt
        assert tool.inputs == {"arguments": '{"expression": "2+3"}'} and tool.outputs["text"] == "5"
        assert "<tool_response>5</tool_response>" in second.inputs["text"]


def test_the_sample_cap_traces_all_n_samples_of_that_many_prompts(chatml_tokenizer, tmp_path, mlflow_store):
    traced_run(chatml_tokenizer, tmp_path, rows=4, n=2, cap=1)
    found = traces(mlflow_store)
    assert len(found) == 2  # one prompt of four, both of its samples
    assert len({trace.info.tags["sample_index"] for trace in found}) == 1
    assert [trace.info.tags["rollout_n"] for trace in found] == ["0", "1"]


def test_an_interaction_reply_is_a_span_of_its_trajectory(chatml_tokenizer, tmp_path, mlflow_store):
    traced_run(chatml_tokenizer, tmp_path, rows=1, interaction=True)
    (trace,) = traces(mlflow_store)
    spans = ordered_spans(trace)
    assert [span.name for span in spans] == ["agent_loop", "generate", "tool:calculator", "generate",
                                             "interaction:gsm8k"]
    reply = spans[-1]
    assert reply.inputs["messages"][-1] == {"role": "assistant", "content": "#### 5"}
    assert reply.outputs["score"] == 1.0 and reply.outputs["should_terminate_sequence"] is True
    assert spans[0].outputs["turn_scores"] == [1.0]


def test_spans_outside_a_traced_trajectory_record_nothing():
    with trace_span("tool:x", {"a": 1}) as span:
        span.set_outputs({"b": 2})  # a no-op span: nothing is active
    tracer = RolloutTracer(TraceSettings(), tokenizer=None)
    assert not tracer.enabled and tracer.traced_rows([0, 1], seed="0") == set()


def test_weave_and_unknown_backends_are_refused_naming_the_fix():
    with pytest.raises(ConfigError, match="backend=weave: W&B Weave tracing is not supported.*backend=mlflow"):
        build_trace_backend(TraceSettings(backend="weave"))
    with pytest.raises(ConfigError, match="backend='zipkin' is not a trace backend"):
        build_trace_backend(TraceSettings(backend="zipkin"))
    with pytest.raises(ConfigError, match="max_samples_per_step_per_worker=0 must be null"):
        build_trace_backend(TraceSettings(backend="mlflow", max_samples_per_step_per_worker=0))


def test_a_missing_mlflow_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'hybridrl\[mlflow\]'"):
        build_trace_backend(TraceSettings(backend="mlflow"))
