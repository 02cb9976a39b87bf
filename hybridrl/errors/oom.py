"""CUDA out-of-memory in a named phase → one actionable error: phase, memory figures, settings, overrides.

A raw OOM is a wall of traceback ending in allocator statistics that do not say which knob to turn.
`oom_guard(phase, cfg, device)` wraps one phase of the RL step and re-raises an OOM as `PhaseOOMError`
whose message names the phase, the memory figures at the time, the verl settings in force for that
phase and two or three overrides with computed values (real key names, so they can be pasted onto the
command line). `hybridrl.errors.run_with_actionable_errors` prints that message before the traceback.

Suggestions only name things that free memory *in the failing phase*: e.g. `optimizer_offload` keeps
the optimizer state off the device while it is idle (gen, log-prob forwards), not during the update
that needs it. Keys the config still refuses (`config.compat.NOT_IMPLEMENTED`) are never suggested.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from hybridrl.config.batch_rules import DYNAMIC_BSZ_KEYS
from hybridrl.config.schema import HybridRLConfig
from hybridrl.utils.memory import allocated_bytes, external_bytes, peak_allocated_bytes

ARR = "actor_rollout_ref"
ROLLOUT, ACTOR, REF, MODEL = f"{ARR}.rollout", f"{ARR}.actor", f"{ARR}.ref", f"{ARR}.model"

PHASE_WHAT = {
    "gen": "rollout generation (engine weights + KV cache + sampling logits)",
    "gen_max": "greedy-baseline generation",
    "old_log_prob": "old log-probs (actor forward, no grad)",
    "ref": "reference log-probs (reference forward, no grad)",
    "teacher": "distillation teachers' log-probs (teacher forwards, no grad; placed and offloaded as the reference)",
    "values": "critic values (critic forward, no grad)",
    "update_critic": "critic update (forward + backward + optimizer step)",
    "update_actor": "actor update (forward + backward + optimizer step)",
    "update_weights": "weight sync from the actor into the rollout engine",
}
COMMON_KEYS = ("data.train_batch_size", f"{ROLLOUT}.n", "data.max_prompt_length", f"{ROLLOUT}.response_length")
OFFLOAD_KEYS = (f"{ACTOR}.fsdp_config.param_offload", f"{ACTOR}.fsdp_config.optimizer_offload")
ENGINE_KEYS = (f"{ROLLOUT}.gpu_memory_utilization", f"{ROLLOUT}.free_cache_engine", f"{ROLLOUT}.keep_decode_graphs")
PHASE_KEYS: dict[str, tuple[str, ...]] = {
    "gen": (*ENGINE_KEYS, f"{ROLLOUT}.max_num_seqs", f"{ROLLOUT}.max_num_batched_tokens", *OFFLOAD_KEYS),
    "old_log_prob": (f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", *ENGINE_KEYS, *OFFLOAD_KEYS),
    "ref": (f"{REF}.log_prob_micro_batch_size_per_gpu", f"{REF}.fsdp_config.param_offload", *ENGINE_KEYS,
            *OFFLOAD_KEYS),
    "values": ("critic.forward_micro_batch_size_per_gpu", "critic.model.fsdp_config.param_offload",
               "critic.model.fsdp_config.optimizer_offload", *OFFLOAD_KEYS),
    "update_critic": ("critic.ppo_mini_batch_size", "critic.ppo_micro_batch_size_per_gpu",
                      "critic.model.enable_gradient_checkpointing", "critic.model.fsdp_config.fsdp_size", *ENGINE_KEYS),
    "update_actor": (f"{ACTOR}.ppo_mini_batch_size", f"{ACTOR}.ppo_micro_batch_size_per_gpu",
                     f"{MODEL}.enable_gradient_checkpointing", f"{ACTOR}.fsdp_config.fsdp_size", *ENGINE_KEYS,
                     f"{REF}.fsdp_config.param_offload"),
    "update_weights": (*ENGINE_KEYS, *OFFLOAD_KEYS),
}
PHASE_KEYS["gen_max"] = PHASE_KEYS["gen"]
PHASE_KEYS["teacher"] = PHASE_KEYS["ref"]  # the teachers follow the reference's micro-batches and fsdp_config
MAX_SUGGESTIONS = 3


class PhaseOOMError(RuntimeError):
    """The device ran out of memory in one phase of the RL step; the message says what to change."""


@dataclass(frozen=True)
class Override:
    """One `key=value` to try, with the value now in force and why it helps."""

    key: str
    value: Any
    now: Any
    why: str

    def text(self) -> str:
        return f"{self.key}={format_value(self.value)}"


def format_value(value: Any) -> str:
    """Hydra spelling: true/false, null, floats without noise."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def get_key(cfg: HybridRLConfig, key: str) -> Any:
    """`cfg`'s value at dotted `key` (None when a section or field is missing)."""
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


# What torch, the CUDA/HIP driver and cuBLAS say when the device is full. Not the bare words "out of memory":
# hybridrl's own messages list host memory among the causes of a dead process (a reward worker, a rank), and a
# CPU run reported as "CUDA out of memory" sends the user after the wrong settings.
DEVICE_OOM = re.compile(r"\b(?:CUDA|HIP) out of memory|\b(?:CUDA|HIP) error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
                        r"|cudaErrorMemoryAllocation")


def is_oom(err: BaseException) -> bool:
    """torch.OutOfMemoryError, or a RuntimeError in torch's or the driver's words for a full device. hybridrl's
    own errors count only for the exception they carry from a worker rank (a rank's own CUDA OOM)."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    if not isinstance(err, RuntimeError):
        return False
    if type(err).__module__.split(".")[0] == "hybridrl":
        carried = getattr(err, "worker_traceback", None)  # a WorkerError's (distributed/errors.py)
        return isinstance(carried, str) and DEVICE_OOM.search(_final_exception(carried)) is not None
    return DEVICE_OOM.search(str(err)) is not None


def _final_exception(formatted_traceback: str) -> str:
    """The `Type: message` lines a formatted traceback ends with, without the frames (whose source lines may
    quote any text) above it."""
    lines = formatted_traceback.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    tail = lines[frames[-1] + 1:] if frames else lines
    return "\n".join(line for line in tail if not line.startswith(" "))


# ----------------------------------------------------------------------------------------- memory
def memory_figures(device: torch.device | str | None) -> dict[str, float] | None:
    """GiB allocated / reserved / peak allocated / total on `device`; None without CUDA (or on CPU)."""
    device = torch.device(device) if device is not None else None
    if not torch.cuda.is_available() or (device is not None and device.type != "cuda"):
        return None
    try:
        gib = 2 ** 30
        device = device if device is not None else torch.device("cuda")
        return {"allocated": allocated_bytes(device) / gib,
                "reserved": (torch.cuda.memory_reserved(device) + external_bytes(device)) / gib,
                "max_allocated": peak_allocated_bytes(device) / gib,
                "total": torch.cuda.get_device_properties(device).total_memory / gib}
    except Exception:  # reporting must never mask the OOM itself
        return None


def memory_line(device: torch.device | str | None, figures: dict[str, float] | None) -> str:
    if figures is None:
        return "Memory: n/a (CUDA not available)"
    return (f"Memory on {device}: allocated {figures['allocated']:.2f} GiB, reserved {figures['reserved']:.2f} GiB, "
            f"peak allocated {figures['max_allocated']:.2f} GiB, total {figures['total']:.2f} GiB")


# ----------------------------------------------------------------------------------- settings
def _effective_sizes(cfg: HybridRLConfig):
    """Per-device row counts (unset micro batch = whole mini batch); None if the config cannot say."""
    try:
        from hybridrl.config.batch_sizes import BatchSizes

        return BatchSizes.from_config(cfg)
    except Exception:
        return None


# key -> (BatchSizes field of its effective value, BatchSizes field of the mini batch it must divide)
MICRO_FIELDS = {
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": ("ppo_micro", "ppo_mini"),
    f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": ("log_prob_micro", None),
    f"{REF}.log_prob_micro_batch_size_per_gpu": ("ref_log_prob_micro", None),
    "critic.ppo_micro_batch_size_per_gpu": ("critic_micro", "critic_mini"),
    "critic.forward_micro_batch_size_per_gpu": ("critic_forward_micro", None),
}


def settings_in_force(cfg: HybridRLConfig, phase: str) -> dict[str, str]:
    """The settings that shape this phase's memory, as display strings (unset micro batches resolved)."""
    sizes = _effective_sizes(cfg)
    shown: dict[str, str] = {}
    for key in COMMON_KEYS + PHASE_KEYS.get(phase, PHASE_KEYS["update_actor"]):
        value = get_key(cfg, key)
        text = format_value(value)
        if value is None and key in MICRO_FIELDS and sizes is not None:
            text = f"null (= {getattr(sizes, MICRO_FIELDS[key][0])} rows per device)"
        shown[key] = text
    dynamic = _halve_token_budget(cfg, DYNAMIC_BSZ_KEYS[phase][2]) if phase in DYNAMIC_BSZ_KEYS else None
    if dynamic is not None:  # use_dynamic_bsz: the token budget, not the row count, sizes micro batches
        shown[dynamic.key] = f"{dynamic.now} tokens per micro batch (use_dynamic_bsz)"
    return shown


# -------------------------------------------------------------------------------- suggestions
def _largest_divisor_at_most(number: int, limit: int) -> int:
    return max(d for d in range(1, max(limit, 1) + 1) if number % d == 0)


def _halve_token_budget(cfg: HybridRLConfig, micro_key: str) -> Override | None:
    """With use_dynamic_bsz on for the phase of `micro_key`, its token budget is what sizes micro batches."""
    for switch, budget, key in DYNAMIC_BSZ_KEYS.values():
        now = get_key(cfg, budget)
        if key == micro_key and get_key(cfg, switch) and isinstance(now, int) and now > 1:
            return Override(budget, now // 2, now, "fewer tokens per micro batch: activations and logits shrink in "
                                                   "proportion")
    return None


def _halve_micro(cfg: HybridRLConfig, key: str) -> Override | None:
    budget = _halve_token_budget(cfg, key)
    if budget is not None:
        return budget
    sizes = _effective_sizes(cfg)
    now = get_key(cfg, key)
    current = now if now is not None else (getattr(sizes, MICRO_FIELDS[key][0]) if sizes else None)
    if not current or current <= 1:
        return None
    mini_field = MICRO_FIELDS[key][1]
    mini = getattr(sizes, mini_field) if (sizes is not None and mini_field) else None
    value = _largest_divisor_at_most(mini, current // 2) if mini else current // 2
    shown = now if now is not None else f"null = {current} rows"
    return Override(key, value, shown, "fewer rows per micro batch: activations and logits shrink in proportion")


def _lower_gpu_util(cfg: HybridRLConfig) -> Override | None:
    key = f"{ROLLOUT}.gpu_memory_utilization"
    now = get_key(cfg, key)
    if now is None or now <= 0.15:
        return None
    value = round(max(0.1, now - (0.2 if now >= 0.5 else 0.1)), 2)
    return Override(key, value, now, "a smaller KV cache leaves room for activations and training state")


def _switch(key: str, value: bool, why: str) -> Callable[[Any], Override | None]:
    """Suggest `key=value` while the config holds the other boolean."""
    def make(cfg: HybridRLConfig) -> Override | None:
        now = get_key(cfg, key)
        return None if now is None or bool(now) == value else Override(key, value, now, why)
    return make


def _halve_int(key: str, why: str, floor: int = 1) -> Callable[[Any], Override | None]:
    def make(cfg: HybridRLConfig) -> Override | None:
        now = get_key(cfg, key)
        return Override(key, max(floor, now // 2), now, why) if isinstance(now, int) and now > floor else None
    return make


def _micro(key: str) -> Callable[[Any], Override | None]:
    return lambda cfg: _halve_micro(cfg, key)


OPTIMIZER_OFFLOAD = _switch(f"{ACTOR}.fsdp_config.optimizer_offload", True,
                            "the actor's optimizer state (8 bytes/param) stays on the CPU outside update_actor")
PARAM_OFFLOAD = _switch(f"{ACTOR}.fsdp_config.param_offload", True,
                        "the actor's parameters and gradients stay on the CPU while it is idle")
REF_OFFLOAD = _switch(f"{REF}.fsdp_config.param_offload", True, "the reference model stays on the CPU between its forwards")
FREE_CACHE = _switch(f"{ROLLOUT}.free_cache_engine", True, "the rollout KV cache is freed outside generation")
FREE_GRAPHS = _switch(f"{ROLLOUT}.keep_decode_graphs", False, "the decode CUDA graphs' activation pool (~max_num_seqs "
                      "x vocab x 2 bytes) is freed outside generation too (captured again each generation)")
GRAD_CKPT = _switch(f"{MODEL}.enable_gradient_checkpointing", True, "keeps one activation per layer instead of all")
CRITIC_CKPT = _switch("critic.model.enable_gradient_checkpointing", True, "keeps one activation per layer instead of all")
ACT_OFFLOAD = _switch(f"{MODEL}.enable_activation_offload", True, "what the forward saves for backward waits in host "
                      "memory (PCIe traffic for device memory)")
CRITIC_ACT_OFFLOAD = _switch("critic.model.enable_activation_offload", True, "what the forward saves for backward "
                             "waits in host memory (PCIe traffic for device memory)")
CRITIC_OPT_OFFLOAD = _switch("critic.model.fsdp_config.optimizer_offload", True,
                             "the critic's optimizer state stays on the CPU outside update_critic")


def _shard_copies(prefix: str, role: str) -> Callable[[Any], Override | None]:
    """fsdp_size=1 keeps a whole copy of the role on every rank: shard it over the ranks instead."""
    def make(cfg: HybridRLConfig) -> Override | None:
        key = f"{prefix}.fsdp_config.fsdp_size"
        now = get_key(cfg, key)
        return Override(key, -1, now, f"the {role}'s parameters, gradients and optimizer state are sharded over "
                                      "the ranks instead of whole on each") if now == 1 else None
    return make


ACTOR_SHARDS = _shard_copies(ACTOR, "actor")
REF_SHARDS = _shard_copies(REF, "reference")
CRITIC_SHARDS = _shard_copies("critic.model", "critic")

MAX_SEQS = _halve_int(f"{ROLLOUT}.max_num_seqs", "fewer sequences decoded at once: smaller logits and activations")
RESPONSE = _halve_int(f"{ROLLOUT}.response_length", "shorter sequences (changes the experiment: last resort)", 16)

CANDIDATES: dict[str, tuple[Callable[[Any], Override | None], ...]] = {
    "gen": (_lower_gpu_util, MAX_SEQS, ACTOR_SHARDS, OPTIMIZER_OFFLOAD, PARAM_OFFLOAD, RESPONSE),
    "old_log_prob": (_micro(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu"), FREE_CACHE, OPTIMIZER_OFFLOAD,
                     _lower_gpu_util, RESPONSE),
    "ref": (_micro(f"{REF}.log_prob_micro_batch_size_per_gpu"), FREE_CACHE, REF_SHARDS, OPTIMIZER_OFFLOAD,
            _lower_gpu_util, RESPONSE),
    "values": (_micro("critic.forward_micro_batch_size_per_gpu"), OPTIMIZER_OFFLOAD, CRITIC_OPT_OFFLOAD, RESPONSE),
    "update_critic": (_micro("critic.ppo_micro_batch_size_per_gpu"), CRITIC_SHARDS, CRITIC_CKPT, CRITIC_ACT_OFFLOAD,
                      FREE_CACHE, OPTIMIZER_OFFLOAD, FREE_GRAPHS, RESPONSE),
    "update_actor": (_micro(f"{ACTOR}.ppo_micro_batch_size_per_gpu"), ACTOR_SHARDS, GRAD_CKPT, ACT_OFFLOAD, FREE_CACHE,
                     REF_OFFLOAD, FREE_GRAPHS, _lower_gpu_util, RESPONSE),
    "update_weights": (_lower_gpu_util, OPTIMIZER_OFFLOAD, PARAM_OFFLOAD, FREE_CACHE),
}
CANDIDATES["gen_max"] = CANDIDATES["gen"]
CANDIDATES["teacher"] = CANDIDATES["ref"]


def _accepted(override: Override) -> bool:
    """False for values the config still refuses as not implemented (never suggest those)."""
    from hybridrl.config.compat import NOT_IMPLEMENTED

    entry = NOT_IMPLEMENTED.get(override.key)
    return entry is None or override.value in entry[0]


def suggest_overrides(cfg: HybridRLConfig, phase: str, limit: int = MAX_SUGGESTIONS) -> list[Override]:
    """Up to `limit` overrides that lower this phase's peak, most effective and least invasive first."""
    found: list[Override] = []
    for make in CANDIDATES.get(phase, CANDIDATES["update_actor"]):
        override = make(cfg)
        if override is not None and _accepted(override) and override.key not in {o.key for o in found}:
            found.append(override)
        if len(found) == limit:
            break
    return found


# ------------------------------------------------------------------------------------ message
def _allocator_hint(figures: dict[str, float] | None) -> str | None:
    if figures and figures["reserved"] - figures["allocated"] > 0.1 * figures["total"]:
        return ("Reserved exceeds allocated by more than 10% of the device: fragmentation; also try the "
                "environment variable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    return None


def oom_message(phase: str, cfg: HybridRLConfig, err: BaseException, device, figures: dict[str, float] | None) -> str:
    what = PHASE_WHAT.get(phase, "a trainer phase")
    lines = [f"CUDA out of memory in phase '{phase}': {what}.", memory_line(device, figures)]
    asked = re.search(r"Tried to allocate [0-9.]+ [KMGT]?i?B", str(err))
    if asked:
        lines[-1] += f"; {asked.group(0)}"
    lines.append("Settings in force: " + ", ".join(f"{k}={v}" for k, v in settings_in_force(cfg, phase).items()))
    suggestions = suggest_overrides(cfg, phase)
    if suggestions:
        lines.append("Try one of these overrides:")
        lines += [f"  {o.text()}   (now {format_value(o.now)}; {o.why})" for o in suggestions]
    hint = _allocator_hint(figures)
    if hint:
        lines.append(hint)
    return "\n".join(lines)


def translate_oom(phase: str, cfg: HybridRLConfig, err: BaseException, device) -> PhaseOOMError:
    """The actionable error for an OOM `err` raised in `phase` (raise it `from err`)."""
    return PhaseOOMError(oom_message(phase, cfg, err, device, memory_figures(device)))


@contextmanager
def oom_guard(phase: str, cfg: HybridRLConfig, device) -> Iterator[None]:
    """Re-raise an out-of-memory error inside the block as `PhaseOOMError` naming `phase`; others pass.

    Nested guards keep the innermost phase (a PhaseOOMError passes through untouched).
    """
    try:
        yield
    except PhaseOOMError:
        raise
    except RuntimeError as err:
        if not is_oom(err):
            raise
        raise translate_oom(phase, cfg, err, device) from err
