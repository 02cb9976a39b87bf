"""`distillation.*` (verl's on-policy distillation): which teachers a config names, the rules its keys keep,
and what verl's teacher-server keys mean here.

hybridrl runs each teacher as a forward-only model role beside the actor, like the reference policy: on the
trainer's devices (the actor's), sharded, offloaded and in the precision that actor_rollout_ref.ref.fsdp_config
says, in micro-batches of the reference's size. verl instead starts inference servers (vLLM / SGLang) on a
resource pool of their own; the keys that size those servers and that pool are accepted and named in one
notice line, and none changes what hybridrl computes.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, fields
from typing import Any

from hybridrl.config.compat import POLICY_LOSS_MODES
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.schema_rollout import RolloutConfig

ESTIMATOR_LOSS_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
TOPK_LOSS_MODES = ("forward_kl_topk",)
DISTILLATION_LOSS_MODES = TOPK_LOSS_MODES + ESTIMATOR_LOSS_MODES  # algorithms/distillation.py's registry
SINGLE_TEACHER = "teacher_model"  # verl's entry name for the one teacher
SINGLE_TEACHER_KEY = "default"  # the routing key verl gives a single teacher (it serves every row)
TEACHER_FIELDS = ("key", "model_path", "num_replicas", "inference", "_target_")
# verl's teacher inference settings that are not rollout keys (distillation.yaml's teacher_model.inference)
VERL_TEACHER_INFERENCE = ("_target_", "dtype", "engine_kwargs", "limit_images", "skip_tokenizer_init",
                          "disable_log_stats", "expert_parallel_size", "data_parallel_size")
POOL_KEYS = ("n_gpus_per_node", "nnodes")
# verl's distillation.yaml defaults of a teacher's inference settings: a dumped verl config carries them all, and
# the notice names only what a user changed
VERL_INFERENCE_DEFAULTS: dict[str, Any] = {
    "gpu_memory_utilization": 0.5, "enforce_eager": True, "cudagraph_capture_sizes": None, "free_cache_engine": True,
    "data_parallel_size": 1, "expert_parallel_size": 1, "tensor_model_parallel_size": 2,
    "max_num_batched_tokens": 8192, "max_num_seqs": 1024, "load_format": "auto", "engine_kwargs": {},
    "limit_images": None, "enable_chunked_prefill": True, "enable_prefix_caching": True, "disable_log_stats": True,
    "skip_tokenizer_init": True,
}


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher: its entry name under distillation.teacher_models, the value of the row field
    `distillation.teacher_key` it serves (SINGLE_TEACHER_KEY: every row) and its model directory."""

    name: str
    key: str
    model_path: str


def distillation_enabled(cfg: HybridRLConfig) -> bool:
    return cfg.distillation.enabled


def resolve_teachers(cfg: HybridRLConfig) -> list[TeacherSpec]:
    """The teachers of an enabled, valid config: one entry serves every row whatever its key (verl's single
    teacher); several are routed by `key`. Call `distillation_problems` first."""
    entries = _teacher_entries(cfg)
    if len(entries) == 1:
        name, entry = next(iter(entries.items()))
        return [TeacherSpec(name, SINGLE_TEACHER_KEY, str(entry["model_path"]))]
    return [TeacherSpec(name, str(entry["key"]), str(entry["model_path"])) for name, entry in entries.items()]


def _teacher_entries(cfg: HybridRLConfig) -> dict[str, dict]:
    """The entries that name a teacher. verl's config carries an empty `teacher_model` placeholder beside named
    teachers (and drops it then): an entry without model_path beside others is that placeholder."""
    entries = {name: dict(entry or {}) for name, entry in cfg.distillation.teacher_models.items()}
    if len(entries) > 1 and entries.get(SINGLE_TEACHER, {}).get("model_path") is None:
        entries.pop(SINGLE_TEACHER, None)
    return entries


def distillation_problems(cfg: HybridRLConfig) -> list[str]:
    """Every rule `distillation.*` breaks (none when distillation is off)."""
    if not distillation_enabled(cfg):
        return []
    return _loss_problems(cfg) + _teacher_problems(cfg)


def _loss_problems(cfg: HybridRLConfig) -> list[str]:
    loss = cfg.distillation.distillation_loss
    key = "distillation.distillation_loss"
    problems = []
    external = bool(os.environ.get("VERL_USE_EXTERNAL_MODULES", "").strip())  # checked at the registry instead
    if loss.loss_mode not in DISTILLATION_LOSS_MODES and not external:
        close = difflib.get_close_matches(str(loss.loss_mode), DISTILLATION_LOSS_MODES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        problems.append(f"{key}.loss_mode={loss.loss_mode!r} is not a distillation loss; {hint}use one of "
                        f"{', '.join(DISTILLATION_LOSS_MODES)} (or register yours with @register_distillation_loss "
                        "in a module named in VERL_USE_EXTERNAL_MODULES)")
    if loss.loss_mode in ("k1", "kl") and not loss.use_policy_gradient:
        problems.append(f"{key}.loss_mode={loss.loss_mode} with use_policy_gradient=false: the gradient of k1 "
                        "(log π − log ν) does not depend on the teacher, so backpropagating it teaches nothing (verl "
                        f"refuses it too); set {key}.use_policy_gradient=true, or use loss_mode=k3 or forward_kl_topk")
    if loss.use_policy_gradient and loss.policy_loss_mode not in POLICY_LOSS_MODES and not external:
        problems.append(f"{key}.policy_loss_mode={loss.policy_loss_mode!r} is not a policy loss; use one of "
                        f"{', '.join(POLICY_LOSS_MODES)} (verl supports vanilla)")
    return problems


def _teacher_problems(cfg: HybridRLConfig) -> list[str]:
    given = cfg.distillation.teacher_models
    entries = _teacher_entries(cfg)
    if not entries:
        return ["distillation.enabled=true needs a teacher: set distillation.teacher_models.teacher_model.model_path "
                "(one teacher), or +distillation.teacher_models.<name>.{key,model_path} per teacher"]
    problems = [p for name, entry in entries.items() for p in _entry_problems(name, entry)]
    if len(entries) > 1:
        if SINGLE_TEACHER in entries and SINGLE_TEACHER in given:
            problems.append(f"distillation.teacher_models.{SINGLE_TEACHER} beside other teachers: verl silently drops "
                            f"this entry then; rename it (e.g. +distillation.teacher_models.teacher_model1.*) to keep it, "
                            "or remove it")
        keys = [entry.get("key") for entry in entries.values()]
        for name, entry in entries.items():
            if entry.get("key") is None:
                problems.append(f"distillation.teacher_models.{name}.key is null: with several teachers each needs the "
                                f"value of the row field distillation.teacher_key={cfg.distillation.teacher_key} it serves")
        duplicated = sorted({k for k in keys if k is not None and keys.count(k) > 1})
        if duplicated:
            problems.append(f"distillation.teacher_models: several teachers serve key(s) {duplicated}; give each "
                            "teacher its own key")
    return problems + _context_problems(cfg, entries)


def _entry_problems(name: str, entry: dict) -> list[str]:
    prefix = f"distillation.teacher_models.{name}"
    problems = [_unknown(f"{prefix}.{field}", field, TEACHER_FIELDS) for field in entry if field not in TEACHER_FIELDS]
    inference_names = tuple(f.name for f in fields(RolloutConfig)) + VERL_TEACHER_INFERENCE
    problems += [_unknown(f"{prefix}.inference.{field}", field, inference_names)
                 for field in dict(entry.get("inference") or {}) if field not in inference_names]
    if entry.get("model_path") in (None, ""):
        problems.append(f"{prefix}.model_path is not set: give the teacher's HF model directory or hub id")
    return problems


def _unknown(path: str, field: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"
    return f"{path} is not a teacher setting{hint}"


def _context_problems(cfg: HybridRLConfig, entries: dict[str, dict]) -> list[str]:
    """verl's check: the teacher reads the student's prompt and whole response (and one more token)."""
    needed = cfg.data.max_prompt_length + cfg.data.max_response_length + 1
    problems = []
    for name, entry in entries.items():
        limit = dict(entry.get("inference") or {}).get("max_model_len")
        if limit is not None and needed > int(limit):
            problems.append(f"distillation.teacher_models.{name}.inference.max_model_len ({limit}) is below "
                            f"data.max_prompt_length + data.max_response_length + 1 ({needed}): the teacher scores "
                            f"the whole prompt and response; raise it to >= {needed} or remove it")
    return problems


def distillation_notices(cfg: HybridRLConfig) -> list[str]:
    """One line naming the verl teacher-server and pool settings this config sets, which hybridrl reads as
    described in the module docstring; a warning for top-k under the policy gradient (verl's)."""
    if not distillation_enabled(cfg) or distillation_problems(cfg):
        return []
    notices = []
    loss = cfg.distillation.distillation_loss
    if loss.use_policy_gradient and loss.loss_mode in TOPK_LOSS_MODES:
        notices.append("warning: distillation.distillation_loss.loss_mode=forward_kl_topk with use_policy_gradient=true "
                       "uses only the sampled token's gradient: the top-k distribution (how the other logits should "
                       "move) is mostly unused, as in verl; forward_kl_topk works best with use_policy_gradient=false")
    settings = _server_settings(cfg)
    if settings:
        notices.append(f"{', '.join(settings)}: verl's teacher inference servers and their resource pool; hybridrl runs "
                       "each teacher as a forward pass on the trainer's devices beside the actor, like the reference "
                       "(precision, sharding and param_offload from actor_rollout_ref.ref.fsdp_config, micro-batches "
                       "of the reference's size, log-probs at temperature 1), so these settings change nothing")
    return notices


def _server_settings(cfg: HybridRLConfig) -> list[str]:
    dist = cfg.distillation
    settings = [f"distillation.{key}={getattr(dist, key)}" for key in POOL_KEYS
                if getattr(dist, key) not in (0, None) and not (key == "n_gpus_per_node" and getattr(dist, key) == 8)]
    for name, entry in _teacher_entries(cfg).items():
        prefix = f"distillation.teacher_models.{name}"
        if entry.get("num_replicas") not in (None, 0):
            settings.append(f"{prefix}.num_replicas={entry['num_replicas']}")
        settings += [f"{prefix}.inference.{field}={value}" for field, value in _set_inference(entry).items()]
    return settings


def _set_inference(entry: dict) -> dict[str, Any]:
    """The inference settings an entry gives, but for max_model_len (checked), verl's defaults and those that
    only restate the student's (prompt/response length, temperature 1)."""
    inference = dict(entry.get("inference") or {})
    quiet = ("_target_", "max_model_len", "prompt_length", "response_length")
    missing = object()
    return {field: value for field, value in inference.items()
            if field not in quiet and VERL_INFERENCE_DEFAULTS.get(field, missing) != value
            and not (field == "temperature" and value in (1, 1.0, None))}


def route_rows(specs: list[TeacherSpec], teacher_key: str, values: list[Any] | None,
               row_fields: list[str]) -> list[int]:
    """Each row's teacher (its position in `specs`) from the rows' `teacher_key` field `values` (None: the
    rows have no such field; `row_fields` are those they have). One teacher takes every row."""
    if len(specs) == 1:
        return [0] * (len(values) if values is not None else 0)
    if values is None:
        raise ValueError(f"distillation.teacher_key={teacher_key}: the rows have no field {teacher_key!r} to route "
                         f"them to a teacher by; their fields are {sorted(row_fields)}: set distillation.teacher_key "
                         "to one of them (verl routes by data_source)")
    by_key = {spec.key: position for position, spec in enumerate(specs)}
    unknown = sorted({str(value) for value in values if str(value) not in by_key})
    if unknown:
        raise ValueError(f"rows with {teacher_key}={unknown} match no teacher: distillation.teacher_models keys are "
                         f"{sorted(by_key)}; add a teacher with one of these keys "
                         f"(+distillation.teacher_models.<name>.key=...) or leave such rows out of the data")
    return [by_key[str(value)] for value in values]
