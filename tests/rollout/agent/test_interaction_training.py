"""verl's GSM8K interaction task trains 2 steps through PPOTrainer on CPU (`preprocess gsm8k --interaction` rows of
real GSM8K, verl's interaction YAML): each trajectory's first turn is a scripted wrong answer (a random tiny model
never writes `#### N`), the simulated user asks again, and the real model answers; the user's reply is never
trained on and its turn scores reach the reward function. With mlflow installed, the same run is traced."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.data.preprocess.gsm8k import preprocess
from hybridrl.models.tiny import build_char_tokenizer
from hybridrl.rollout.base import SamplingParams, TokenOutput
from hybridrl.rollout.hf_backend import HFRolloutBackend
from hybridrl.rollout.interactions.gsm8k import INCORRECT
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.rollout.agent import interaction_fixtures
from tests.rollout.agent.hf_request_engine import teacher_forced_log_probs
from tests.rollout.agent.test_trainer_rows import chatml_model_dir  # noqa: F401  (a module-scoped fixture)
from tests.trainer.helpers import local_worker

WRONG_ANSWER = "#### 0<|im_end|>"
INTERACTION_YAML = ("interaction:\n  - name: \"gsm8k\"\n    class_name: \"verl.interactions.gsm8k_interaction."
                    "Gsm8kInteraction\"\n    config: {}\n")


class ScriptedWrongAnswer:
    """The hf backend's request engine, except that turn 0 of every trajectory is WRONG_ANSWER."""

    def __init__(self, backend: HFRolloutBackend, engine) -> None:
        self.backend, self.engine = backend, engine

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        if not request_id.endswith("-0"):
            return await self.engine.generate(request_id, prompt_ids, params)
        tokens = build_char_tokenizer(chat_format="chatml")(WRONG_ANSWER, add_special_tokens=False)["input_ids"]
        return TokenOutput(tokens, teacher_forced_log_probs(self.backend.model, prompt_ids, tokens), "stop")

    async def abort(self, request_id: str) -> TokenOutput | None:
        return await self.engine.abort(request_id)


@pytest.fixture
def scripted_wrong_answer(monkeypatch):
    real = HFRolloutBackend.request_engine
    monkeypatch.setattr(HFRolloutBackend, "request_engine", lambda self: ScriptedWrongAnswer(self, real(self)))


@pytest.fixture(scope="module")
def gsm8k_interaction_task(tmp_path_factory, gsm8k_dir) -> tuple[str, str, str]:
    """(train parquet, test parquet, interaction YAML): 4 real GSM8K rows each, verl's interaction row format."""
    root = tmp_path_factory.mktemp("gsm8k_interaction")
    raw = root / "raw"
    raw.mkdir()
    for split in ("train", "test"):
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:4]
        (raw / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    paths = preprocess(raw, root / "data", interaction=True)
    (root / "gsm8k_interaction_config.yaml").write_text(INTERACTION_YAML)
    return str(paths["train"]), str(paths["test"]), str(root / "gsm8k_interaction_config.yaml")


def overrides(model_dir: str, task: tuple[str, str, str], out_dir: str) -> list[str]:
    train, test, interactions = task
    return [
        "algorithm.adv_estimator=grpo", f"data.train_files={train}", f"data.val_files={test}",
        "data.train_batch_size=4", "data.max_prompt_length=1024", "data.max_response_length=200",
        "data.return_raw_chat=true", f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.max_user_turns=5",
        f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={interactions}",
        "trainer.device=cpu", "trainer.logger=[file]", "trainer.total_training_steps=2", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.val_before_train=false", f"trainer.default_local_dir={out_dir}",
        f"trainer.rollout_data_dir={os.path.join(out_dir, 'rollouts')}", "trainer.seed=7",
        f"custom_reward_function.path={interaction_fixtures.__file__}",
        "custom_reward_function.name=compute_score_with_turn_scores",
    ]


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_verl_interaction_task_trains_two_steps(tmp_path, chatml_model_dir, gsm8k_interaction_task,  # noqa: F811
                                                scripted_wrong_answer):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(overrides(chatml_model_dir, gsm8k_interaction_task, out)))
    model = local_worker(trainer).actor.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.fit()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items()), "parameters did not change"
    records = read_jsonl(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["actor/pg_loss"]) and record["actor/grad_norm"] > 0
        assert record["agent_loop/num_interaction_turns/min"] >= 1, sorted(record)  # the user answered every wrong first turn
        assert record["agent_loop/interaction_errors"] == 0
        assert record["num_turns/min"] >= 4  # user prompt, wrong answer, the user's reply, the model's answer
    user_turns = [turn for row in read_jsonl(os.path.join(out, "rollouts", "1.jsonl")) for turn in row["turns"]
                  if turn["role"] == "user"]
    assert len(user_turns) == 8 and all(INCORRECT in turn["text"] and not turn["trained"] for turn in user_turns)


def test_the_run_is_traced_with_the_trainer_step(tmp_path, monkeypatch, chatml_model_dir,  # noqa: F811
                                                 gsm8k_interaction_task, scripted_wrong_answer):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # no export thread left running at pytest's exit
    out = str(tmp_path / "run")
    cfg = load_config(overrides(chatml_model_dir, gsm8k_interaction_task, out) + [
        "trainer.total_training_steps=1", "trainer.project_name=interaction_trace",
        "actor_rollout_ref.rollout.trace.backend=mlflow",
        "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=1"])
    PPOTrainer(cfg).fit()
    experiment = mlflow.get_experiment_by_name("interaction_trace")
    traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    assert len(traces) == 2  # one prompt, its n=2 samples
    for trace in traces:
        assert trace.info.tags["step"] == "1" and trace.info.tags["validate"] == "False"
        names = [span.name for span in sorted(trace.data.spans, key=lambda span: span.start_time_ns)]
        assert names[:4] == ["agent_loop", "generate", "interaction:gsm8k", "generate"]
