"""Agent loops inside the trainer: verl's GSM8K tool task (`preprocess gsm8k --tool` rows of real GSM8K, verl's own
tool YAML) trains 2 steps through PPOTrainer on CPU with `multi_turn.enable=true`, on the hf backend's request
engine. A random tiny model never writes a tool call, so each trajectory's first turn is a scripted hermes call
(with the model's own teacher-forced log-probs); every later turn is the real model's."""

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
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.rollout.agent import scripted_call_loop
from tests.rollout.agent.helpers import tool_call
from tests.rollout.agent.hf_request_engine import teacher_forced_log_probs
from tests.rollout.tools.test_registry import VERL_GSM8K_TOOL_YAML
from tests.trainer.helpers import local_worker

FIRST_TURN = tool_call("calc_gsm8k_reward", answer="7") + "<|im_end|>"


class ScriptedFirstTurn:
    """The hf backend's request engine, except that turn 0 of every trajectory is FIRST_TURN."""

    def __init__(self, backend: HFRolloutBackend, engine) -> None:
        self.backend, self.engine = backend, engine

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        if not request_id.endswith("-0"):
            return await self.engine.generate(request_id, prompt_ids, params)
        tokens = build_char_tokenizer(chat_format="chatml")(FIRST_TURN, add_special_tokens=False)["input_ids"]
        return TokenOutput(tokens, teacher_forced_log_probs(self.backend.model, prompt_ids, tokens), "stop")

    async def abort(self, request_id: str) -> TokenOutput | None:
        return await self.engine.abort(request_id)


@pytest.fixture
def scripted_first_turn(monkeypatch):
    real = HFRolloutBackend.request_engine
    monkeypatch.setattr(HFRolloutBackend, "request_engine", lambda self: ScriptedFirstTurn(self, real(self)))


@pytest.fixture(scope="module")
def chatml_model_dir(tmp_path_factory) -> str:
    from hybridrl.models.tiny import save_tiny_model_dir

    return save_tiny_model_dir(str(tmp_path_factory.mktemp("chatml")), chat_format="chatml", seed=0)


@pytest.fixture(scope="module")
def gsm8k_tool_task(tmp_path_factory, gsm8k_dir) -> tuple[str, str, str]:
    """(train parquet, test parquet, tool YAML): 4 real GSM8K rows each, verl's tool row format."""
    root = tmp_path_factory.mktemp("gsm8k_tool")
    raw = root / "raw"
    raw.mkdir()
    for split in ("train", "test"):
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:4]
        (raw / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    paths = preprocess(raw, root / "data", tool=True)
    (root / "tools.yaml").write_text(VERL_GSM8K_TOOL_YAML)
    return str(paths["train"]), str(paths["test"]), str(root / "tools.yaml")


def tool_run_overrides(model_dir: str, task: tuple[str, str, str], out_dir: str, extra: list[str] = ()) -> list[str]:
    train, test, tools = task
    return [
        "algorithm.adv_estimator=grpo", f"data.train_files={train}", f"data.val_files={test}",
        "data.train_batch_size=4", "data.max_prompt_length=1400", "data.max_response_length=256",
        "data.return_raw_chat=true", f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.multi_turn.enable=true", f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "trainer.device=cpu", "trainer.logger=[file]", "trainer.total_training_steps=2", "trainer.test_freq=2",
        "trainer.save_freq=-1", "trainer.val_before_train=false", f"trainer.default_local_dir={out_dir}",
        f"trainer.rollout_data_dir={os.path.join(out_dir, 'rollouts')}", "trainer.seed=7",
        f"custom_reward_function.path={scripted_call_loop.__file__}", "custom_reward_function.name=compute_score",
    ] + list(extra)


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_verl_tool_task_trains_two_steps(tmp_path, chatml_model_dir, gsm8k_tool_task, scripted_first_turn):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tool_run_overrides(chatml_model_dir, gsm8k_tool_task, out)))
    model = local_worker(trainer).actor.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    updated: list = []
    real_update = trainer.update
    trainer.update = lambda batch, *args: (updated.append(batch), real_update(batch, *args))[1]
    trainer.fit()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items()), "parameters did not change"
    records = read_jsonl(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean"):
            assert math.isfinite(record[key]), (key, record[key])
        assert record["actor/grad_norm"] > 0
        assert record["agent_loop/num_tool_calls/min"] >= 1 and record["tool_call_counts/mean"] >= 1
        assert record["num_turns/min"] >= 4  # user, assistant (the call), tool, assistant
        assert record["agent_loop/tool_errors/total"] == 0
        assert "agent_loop/generate_sequences/mean" in record and "agent_loop/tool_calls/mean" in record
    assert any(key.startswith("val-core/openai/gsm8k/") for key in records[-1])  # validation ran the loops too
    # The dump shows each turn and which spans were trained on: the tool's answer never is.
    dumped = read_jsonl(os.path.join(out, "rollouts", "1.jsonl"))
    assert len(dumped) == 8
    tool_turns = [turn for row in dumped for turn in row["turns"] if "Current parsed answer" in turn["text"]]
    assert tool_turns and not any(turn["trained"] for turn in tool_turns)

    assert_tool_tokens_untrained(updated[0], trainer.tokenizer)


def assert_tool_tokens_untrained(batch, tokenizer) -> None:
    """The batch the actor trained on: the tool's answer is response_mask 0, rollout log-prob 0 and advantage 0
    (the losses aggregate over response_mask); the scripted call is mask 1 with its real log-probs."""
    call = tokenizer(FIRST_TURN, add_special_tokens=False)["input_ids"]
    for row in range(len(batch)):
        response, mask = batch["responses"][row].tolist(), batch["response_mask"][row]
        assert response[: len(call)] == call and bool(mask[: len(call)].all())
        assert bool((batch["rollout_log_probs"][row, : len(call)] < 0).all())
        text = tokenizer.decode(response)
        start = text.index("<tool_response>")
        observed = len(tokenizer(text[:start], add_special_tokens=False)["input_ids"])
        assert int(mask[observed]) == 0 and float(batch["rollout_log_probs"][row, observed]) == 0.0
        assert float(batch["advantages"][row, observed]) == 0.0
        valid = int(batch["attention_mask"][row, -batch["responses"].shape[1]:].sum())
        assert int(mask[:valid].sum()) < valid  # some valid tokens are not trained on


@pytest.mark.parametrize("tool_class,kind,text", [
    ("RaisingTool", "exception", "disk on fire"),
    ("HangingTool", "timeout", "timed out"),
    ("GarbageTool", "invalid_return", "calc_gsm8k_reward"),
])
def test_a_failing_tool_answers_with_an_error_and_the_run_continues(tmp_path, chatml_model_dir, gsm8k_tool_task,
                                                                     scripted_first_turn, tool_class, kind, text):
    tools = tmp_path / "tools.yaml"
    tools.write_text(VERL_GSM8K_TOOL_YAML.replace('"verl.tools.gsm8k_tool.Gsm8kTool"',
                                                  f"tests.rollout.agent.tool_fixtures.{tool_class}"))
    out = str(tmp_path / "run")
    task = (gsm8k_tool_task[0], gsm8k_tool_task[1], str(tools))
    PPOTrainer(load_config(tool_run_overrides(chatml_model_dir, task, out, extra=[
        "trainer.total_training_steps=1", "trainer.test_freq=-1",
        "actor_rollout_ref.rollout.multi_turn.tool_call_timeout=0.5"]))).fit()
    [record] = read_jsonl(os.path.join(out, "metrics.jsonl"))
    assert record[f"agent_loop/tool_errors/{kind}"] == 8 == record["agent_loop/tool_errors/total"]
    assert math.isfinite(record["actor/pg_loss"])
    tool_turns = [turn for row in read_jsonl(os.path.join(out, "rollouts", "1.jsonl")) for turn in row["turns"]
                  if turn["role"] == "tool"]
    assert len(tool_turns) == 8 and all(text in turn["text"] and not turn["trained"] for turn in tool_turns)


@pytest.mark.slow
def test_two_cpu_ranks_on_the_hybrid_engine(tmp_path, chatml_model_dir, gsm8k_tool_task):
    """2 worker processes, each running the agent loops of its shard on hybridrl's own engine (its request API);
    the controller joins the rows and computes the agent metrics over all 8 trajectories."""
    loops = tmp_path / "loops.yaml"
    loops.write_text(scripted_call_loop.CONFIG)
    out = str(tmp_path / "run")
    overrides = [o for o in tool_run_overrides(chatml_model_dir, gsm8k_tool_task, out)
                 if o != "actor_rollout_ref.rollout.name=hf"]
    trainer = PPOTrainer(load_config(overrides + [
        "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.name=hybrid", "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}", "trainer.test_freq=-1"]))
    assert trainer.plan.on_ranks and trainer.plan.world_size == 2
    trainer.fit()
    records = read_jsonl(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["actor/pg_loss"]) and record["actor/grad_norm"] > 0
        assert record["agent_loop/num_tool_calls/min"] >= 1 and record["num_turns/min"] >= 4
        assert record["agent_loop/tool_errors/total"] == 0
    rows = read_jsonl(os.path.join(out, "rollouts", "2.jsonl"))
    assert len(rows) == 8 and all(any(t["role"] == "tool" and not t["trained"] for t in row["turns"]) for row in rows)


@pytest.mark.slow
def test_a_resumed_run_reproduces_the_trajectories(tmp_path, chatml_model_dir, gsm8k_tool_task, scripted_first_turn):
    """Interrupted after step 2 and resumed, step 3 generates the trajectories (and metrics) of the run that went
    straight through; with dynamic batching of the actor's micro-batches."""
    common = ["trainer.save_freq=2", "trainer.test_freq=-1", "actor_rollout_ref.actor.use_dynamic_bsz=true",
              "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"]
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")

    def train(out: str, steps: int, extra: list[str] = ()) -> None:
        PPOTrainer(load_config(tool_run_overrides(chatml_model_dir, gsm8k_tool_task, out, extra=[
            *common, f"trainer.total_training_steps={steps}", *extra]))).fit()

    train(straight, 3)
    train(resumed, 2)
    train(resumed, 3, ["trainer.resume_mode=auto"])
    dumps = [read_jsonl(os.path.join(out, "rollouts", "3.jsonl")) for out in (straight, resumed)]
    assert [row["output"] for row in dumps[0]] == [row["output"] for row in dumps[1]]
    last = [read_jsonl(os.path.join(out, "metrics.jsonl"))[-1] for out in (straight, resumed)]
    assert last[1]["step"] == 3
    for key in ("actor/pg_loss", "critic/score/mean", "num_turns/mean", "agent_loop/num_tool_calls/mean"):
        assert last[1][key] == pytest.approx(last[0][key], rel=1e-5, abs=1e-7), key
