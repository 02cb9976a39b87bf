"""The distillation teachers: log-probs equal to a direct HF forward, rows routed by key, start-up checks."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config.distillation_rules import TeacherSpec, route_rows
from hybridrl.distributed import InProcessGroup
from hybridrl.models.hf import load_causal_lm, load_tokenizer
from hybridrl.workers.role_groups import GroupTeacher
from hybridrl.workers.teacher import TeacherWorker
from tests.workers.helpers import ragged_batch, worker_config


@pytest.fixture(scope="module")
def teacher_dirs(tmp_path_factory) -> tuple[str, str]:
    from hybridrl.models.tiny import save_tiny_model_dir

    root = tmp_path_factory.mktemp("teachers")
    return (save_tiny_model_dir(str(root / "a"), arch="qwen2", seed=1, hidden_size=48),
            save_tiny_model_dir(str(root / "b"), arch="llama", seed=2))


def teacher_worker(student: str, teachers: dict[str, tuple[str | None, str]], *extra: str) -> TeacherWorker:
    overrides = ["distillation.enabled=true"]
    for name, (key, path) in teachers.items():
        overrides += [f"+distillation.teacher_models.{name}.model_path={path}"]
        overrides += [f"+distillation.teacher_models.{name}.key={key}"] if key is not None else []
    cfg = worker_config(student, [*overrides, *extra])
    return TeacherWorker(cfg, 2, torch.device("cpu"), load_tokenizer(student))


def direct_log_probs(path: str, batch) -> torch.Tensor:
    """(B, R, V) log-probs of the next token at each response position, from HF's own forward."""
    model = load_causal_lm(path)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits.float()
    width = batch["responses"].shape[1]
    return torch.log_softmax(logits[:, -width - 1:-1], -1)


@pytest.mark.parametrize("remove_padding", [False, True])
def test_sampled_token_log_probs_equal_a_direct_hf_forward(tiny_model_dir, teacher_dirs, remove_padding):
    worker = teacher_worker(tiny_model_dir, {"teacher_model": (None, teacher_dirs[0])},
                            f"actor_rollout_ref.model.use_remove_padding={remove_padding}")
    batch = ragged_batch()
    batch["teacher_index"] = torch.zeros(len(batch), dtype=torch.long)
    out = worker.compute_teacher_log_probs(batch)
    want = direct_log_probs(teacher_dirs[0], batch).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(out["teacher_logprobs"][mask], want[mask], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("remove_padding", [False, True])
def test_topk_log_probs_and_ids_equal_a_direct_hf_forward(tiny_model_dir, teacher_dirs, remove_padding):
    worker = teacher_worker(tiny_model_dir, {"teacher_model": (None, teacher_dirs[0])},
                            "distillation.distillation_loss.loss_mode=forward_kl_topk",
                            "distillation.distillation_loss.topk=5",
                            f"actor_rollout_ref.model.use_remove_padding={remove_padding}")
    batch = ragged_batch()
    batch["teacher_index"] = torch.zeros(len(batch), dtype=torch.long)
    out = worker.compute_teacher_log_probs(batch)
    top = torch.topk(direct_log_probs(teacher_dirs[0], batch), 5, dim=-1)
    mask = batch["response_mask"].bool()
    assert out["teacher_logprobs"].shape == (8, 10, 5) and out["teacher_ids"].shape == (8, 10, 5)
    torch.testing.assert_close(out["teacher_logprobs"][mask], top.values[mask], rtol=1e-4, atol=1e-4)
    assert torch.equal(out["teacher_ids"][mask], top.indices[mask])


def test_rows_go_to_the_teacher_their_data_source_names(tiny_model_dir, teacher_dirs):
    teachers = {"math": ("openai/gsm8k", teacher_dirs[0]), "geo": ("hiyouga/geometry3k", teacher_dirs[1])}
    worker = teacher_worker(tiny_model_dir, teachers)
    group = GroupTeacher(InProcessGroup(worker), worker_config(tiny_model_dir, [
        "distillation.enabled=true", *[f"+distillation.teacher_models.{n}.{f}={v}" for n, (k, p) in teachers.items()
                                       for f, v in (("key", k), ("model_path", p))]]))
    batch = ragged_batch()
    sources = ["openai/gsm8k", "hiyouga/geometry3k"] * 4
    batch["data_source"] = sources
    out = group.compute_teacher_log_probs(batch)["teacher_logprobs"]
    responses = batch["responses"].unsqueeze(-1)
    by_teacher = {key: direct_log_probs(path, batch).gather(-1, responses).squeeze(-1) for key, path in teachers.values()}
    mask = batch["response_mask"].bool()
    for row, source in enumerate(sources):
        torch.testing.assert_close(out[row][mask[row]], by_teacher[source][row][mask[row]], rtol=1e-4, atol=1e-4)


def test_a_row_whose_key_matches_no_teacher_is_refused_with_the_keys():
    specs = [TeacherSpec("a", "openai/gsm8k", "/a"), TeacherSpec("b", "math", "/b")]
    assert route_rows(specs, "data_source", ["math", "openai/gsm8k"], ["data_source"]) == [1, 0]
    with pytest.raises(ValueError, match=r"data_source=\['lighteval/MATH'\] match no teacher.*\['math', 'openai/gsm8k'\]"):
        route_rows(specs, "data_source", ["math", "lighteval/MATH"], ["data_source"])
    with pytest.raises(ValueError, match="no field 'task'.*data_source"):
        route_rows(specs, "task", None, ["data_source", "prompt"])
    assert route_rows(specs[:1], "task", [None, None], []) == [0, 0]  # one teacher serves every row


def test_a_teacher_of_another_vocabulary_is_refused_naming_both_models(tiny_model_dir, tmp_path):
    from hybridrl.models.tiny import save_tiny_model_dir

    other = save_tiny_model_dir(str(tmp_path / "other"), arch="qwen2", seed=1, chars="0123456789+=")
    with pytest.raises(ValueError, match=rf"model_path={other} has another vocabulary than the student "
                                         rf"actor_rollout_ref.model.path={tiny_model_dir}"):
        teacher_worker(tiny_model_dir, {"teacher_model": (None, other)})


def test_topk_beyond_the_vocabulary_is_refused(tiny_model_dir, teacher_dirs):
    with pytest.raises(ValueError, match=r"topk \(100000\) exceeds the vocabulary"):
        teacher_worker(tiny_model_dir, {"teacher_model": (None, teacher_dirs[0])},
                       "distillation.distillation_loss.loss_mode=forward_kl_topk",
                       "distillation.distillation_loss.topk=100000")
