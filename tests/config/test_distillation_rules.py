"""`distillation.*`: the rules its keys keep, the teachers a config names, and the notice on verl's server keys."""

from __future__ import annotations

import logging

import pytest

from hybridrl.config import ConfigError, load_config
from hybridrl.config.distillation_rules import DISTILLATION_LOSS_MODES, SINGLE_TEACHER_KEY, resolve_teachers
from hybridrl.config.run_plan import build_run_plan
from hybridrl.config.validate import validate_config

BASE = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "critic.ppo_micro_batch_size_per_gpu=2", "distillation.enabled=true"]
ONE_TEACHER = ["distillation.teacher_models.teacher_model.model_path=/models/Qwen3-32B"]
TWO_TEACHERS = ["+distillation.teacher_models.gsm8k.key=openai/gsm8k", "+distillation.teacher_models.gsm8k.model_path=/m/a",
                "+distillation.teacher_models.geo3k.key=hiyouga/geometry3k", "+distillation.teacher_models.geo3k.model_path=/m/b"]


def problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        validate_config(load_config([*BASE, *overrides]))
    return str(err.value)


def test_registry_and_config_list_the_same_loss_modes():
    from hybridrl.algorithms.distillation import DISTILLATION_LOSSES

    assert set(DISTILLATION_LOSS_MODES) <= set(DISTILLATION_LOSSES)


def test_an_unknown_loss_mode_gets_a_did_you_mean():
    text = problems(*ONE_TEACHER, "distillation.distillation_loss.loss_mode=forward_kl_top_k")
    assert "loss_mode='forward_kl_top_k' is not a distillation loss; did you mean forward_kl_topk?" in text


def test_k1_without_the_policy_gradient_is_refused_with_the_fix():
    text = problems(*ONE_TEACHER, "distillation.distillation_loss.loss_mode=k1")
    assert "does not depend on the teacher" in text and "use_policy_gradient=true" in text
    validate_config(load_config([*BASE, *ONE_TEACHER, "distillation.distillation_loss.loss_mode=k1",
                                 "distillation.distillation_loss.use_policy_gradient=true"]))


def test_enabled_without_a_teacher_names_the_key_to_set():
    assert "needs a teacher: set distillation.teacher_models.teacher_model.model_path" in problems()


def test_a_typo_in_a_teacher_setting_is_refused_with_a_did_you_mean():
    text = problems(*ONE_TEACHER, "+distillation.teacher_models.teacher_model.inference.tensor_parallel_size=2",
                    "+distillation.teacher_models.teacher_model.modelpath=/x")
    assert "teacher_model.inference.tensor_parallel_size is not a teacher setting; did you mean " \
           "tensor_model_parallel_size?" in text
    assert "teacher_model.modelpath is not a teacher setting; did you mean model_path?" in text


def test_verls_silently_dropped_teacher_model_beside_named_teachers_is_refused():
    text = problems(*TWO_TEACHERS, *ONE_TEACHER)
    assert "verl silently drops this entry then; rename it" in text


def test_several_teachers_need_distinct_keys():
    text = problems(*TWO_TEACHERS, "+distillation.teacher_models.geo3k.key=openai/gsm8k")
    assert "several teachers serve key(s) ['openai/gsm8k']" in text


def test_max_model_len_must_hold_prompt_and_response():
    text = problems(*ONE_TEACHER, "data.max_prompt_length=1024", "data.max_response_length=2048",
                    "+distillation.teacher_models.teacher_model.inference.max_model_len=3000")
    assert "max_model_len (3000) is below data.max_prompt_length + data.max_response_length + 1 (3073)" in text


def test_teachers_resolve_like_verl():
    one = resolve_teachers(load_config([*BASE, *ONE_TEACHER, "+distillation.teacher_models.teacher_model.key=x"]))
    assert [(t.name, t.key, t.model_path) for t in one] == [("teacher_model", SINGLE_TEACHER_KEY, "/models/Qwen3-32B")]
    two = resolve_teachers(load_config([*BASE, *TWO_TEACHERS,
                                        "+distillation.teacher_models.teacher_model.inference.name=vllm"]))
    assert [(t.name, t.key) for t in two] == [("gsm8k", "openai/gsm8k"), ("geo3k", "hiyouga/geometry3k")]


def test_verls_server_settings_are_named_in_one_notice(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        load_config([*BASE, *ONE_TEACHER, "distillation.n_gpus_per_node=4", "distillation.nnodes=1",
                     "+distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.4"])
    lines = [r.getMessage() for r in caplog.records if "teacher inference servers" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("distillation.n_gpus_per_node=4, distillation.nnodes=1, "
                               "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.4")
    assert "on the trainer's devices beside the actor" in lines[0]


def test_the_teachers_run_in_the_actors_group():
    cfg = load_config([*BASE, *ONE_TEACHER, "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.device_ids=[1]",
                       "actor_rollout_ref.actor.device_ids=[0]"])
    plan = build_run_plan(cfg, device="cuda", world_size=2, launcher="local")
    assert plan.needs.teacher and "teacher" in plan.group_of("actor").roles
    assert plan.group_of("teacher").device_ids == (0,)
