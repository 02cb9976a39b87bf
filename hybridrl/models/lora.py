"""LoRA on an HF causal LM through HF PEFT (verl's `actor_rollout_ref.model.lora_*` keys).

Why these helpers exist, besides wrapping `get_peft_model`:
- the reference policy is the frozen base model, so with LoRA it needs no second copy of the weights:
  the adapters are switched off around the ref forward (`reference_forward_context`);
- the rollout engine knows plain HF parameter names, not PEFT's (`base_model.model.….base_layer.weight`),
  and after the first full sync only the LoRA-targeted Linears change, so only those are sent, each as
  the merged weight W + scale·B@A computed one layer at a time (`merged_lora_deltas`);
- checkpoints are the small adapter (`save_adapter`), and a deployable plain HF directory is one
  merge away (`export_merged`).

peft is optional (`pip install 'hybridrl[lora]'`); it is imported only in `_peft()`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hybridrl.logging.backends import MissingDependencyError

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

PEFT_PREFIX = "base_model.model."  # PeftModel -> LoraModel -> the HF model
ADAPTER_PATH_KEY = "actor_rollout_ref.model.lora_adapter_path"


def _peft() -> Any:
    """The peft module, or a one-line install hint instead of an ImportError traceback."""
    try:
        import peft
    except ImportError as error:
        raise MissingDependencyError("actor_rollout_ref.model.lora_rank > 0 needs the peft package, which is not "
                                     "installed; install it with `pip install 'hybridrl[lora]'`") from error
    return peft


def _as_modules(value: Iterable[str] | str | None) -> list[str] | str | None:
    """A config value (str such as 'all-linear' or a regex, or a list/ListConfig) as peft expects it."""
    if value is None or isinstance(value, str):
        return value
    return [str(v) for v in value]


def apply_lora(model: PreTrainedModel, *, rank: int, alpha: int, target_modules: list[str] | str,
               exclude_modules: list[str] | str | None = None, adapter_path: str | None = None) -> PeftModel:
    """Wrap `model` with trainable LoRA adapters; the base weights are frozen (requires_grad=False).

    With `adapter_path`, training resumes from that saved adapter and its own adapter_config.json decides
    rank, alpha and targets (as in verl); a mismatch with the configured values is logged, not hidden.
    """
    if rank <= 0:
        raise ValueError(f"actor_rollout_ref.model.lora_rank ({rank}) must be > 0 to apply LoRA")
    peft = _peft()
    if adapter_path is not None:
        return _load_adapter(peft, model, adapter_path, rank, alpha)
    # exclude_modules arrived in peft 0.14; pass it only when set so older peft still works without it.
    excluded = {"exclude_modules": _as_modules(exclude_modules)} if exclude_modules else {}
    if excluded and "exclude_modules" not in peft.LoraConfig.__dataclass_fields__:
        raise MissingDependencyError("actor_rollout_ref.model.exclude_modules needs peft>=0.14; "
                                     "upgrade with `pip install -U 'peft>=0.14'` or unset exclude_modules")
    config = peft.LoraConfig(task_type="CAUSAL_LM", r=rank, lora_alpha=alpha, bias="none",
                             target_modules=_as_modules(target_modules), **excluded)
    with _without_peft_deprecation_warning():
        return peft.get_peft_model(model, config)


@contextmanager
def _without_peft_deprecation_warning() -> Iterator[None]:
    """peft calls transformers' deprecated `is_gradient_checkpointing`; nothing a user can change."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        yield


def _load_adapter(peft: Any, model: PreTrainedModel, adapter_path: str, rank: int, alpha: int) -> PeftModel:
    path = os.path.expanduser(os.path.expandvars(adapter_path))
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise FileNotFoundError(f"{ADAPTER_PATH_KEY}={adapter_path!r} has no adapter_config.json; point it at a "
                                "directory written by save_adapter / PeftModel.save_pretrained, or unset it")
    with _without_peft_deprecation_warning():
        peft_model = peft.PeftModel.from_pretrained(model, path, is_trainable=True)
    saved = peft_model.peft_config["default"]
    if (saved.r, saved.lora_alpha) != (rank, alpha):
        logger.warning("LoRA adapter %s has r=%s, lora_alpha=%s; using those instead of the configured "
                       "lora_rank=%s, lora_alpha=%s", path, saved.r, saved.lora_alpha, rank, alpha)
    return peft_model


def reference_forward_context(peft_model: PeftModel) -> AbstractContextManager:
    """A context in which `peft_model` computes with its base weights only: the reference policy.

    This is `peft_model.disable_adapter()`: it switches the adapters off and back on around the block, so
    the ref log-probs come from the same module without a second copy of the weights (verl's LoRA ref).
    The actor and the reference then share one module: run ref forwards under `torch.no_grad()` and never
    interleave them with the actor's forward/backward (the trainer's phases are sequential, so they don't).
    """
    if not hasattr(peft_model, "disable_adapter"):
        raise TypeError(f"reference_forward_context needs a PeftModel (apply_lora), got {type(peft_model).__name__};"
                        " without LoRA the reference policy is a separate frozen model")
    return peft_model.disable_adapter()


def trainable_parameter_names(model: nn.Module) -> list[str]:
    """Names of parameters that require grad: with LoRA only the adapters (what the optimizer should get)."""
    return [name for name, param in model.named_parameters() if param.requires_grad]


def hf_name(peft_name: str) -> str:
    """PEFT's parameter name as the plain HF model names it (drops `base_model.model.` and `.base_layer`)."""
    name = peft_name.removeprefix(PEFT_PREFIX)
    return name.replace(".base_layer.", ".")


def _is_adapter_tensor(name: str) -> bool:
    return any(f".{part}" in name for part in ("lora_", "modules_to_save."))


def base_named_weights(peft_model: PeftModel) -> Iterator[tuple[str, torch.Tensor]]:
    """All base-model weights (adapters not applied) with HF names: the rollout's first full sync.

    Follow it with `merged_lora_deltas` (or use `merged_named_weights`) when the adapter is non-zero,
    e.g. after `lora_adapter_path` was loaded.
    """
    for name, tensor in peft_model.get_base_model().state_dict().items():
        if not _is_adapter_tensor(name):
            yield hf_name(name), tensor


def lora_targets(peft_model: PeftModel) -> dict[str, nn.Module]:
    """{HF weight name: its LoRA layer} for every targeted weight (one walk over the modules)."""
    return {f"{name}.weight": module for name, module in _lora_layers(peft_model)}


def _lora_layers(peft_model: PeftModel) -> Iterator[tuple[str, nn.Module]]:
    """(HF module name, LoRA layer) for every module PEFT wrapped."""
    tuner_layer = _peft().tuners.tuners_utils.BaseTunerLayer
    for name, module in peft_model.get_base_model().named_modules():
        if isinstance(module, tuner_layer) and hasattr(module, "get_delta_weight"):
            yield name, module


def _merged_weight(module: nn.Module) -> torch.Tensor:
    """W + Σ_active scale·B@A for one layer (peft's own delta, so fan_in_fan_out/embeddings are handled)."""
    weight = module.get_base_layer().weight
    if module.merged or module.disable_adapters:  # already merged into W, or adapters switched off
        return weight.detach()
    merged = weight.detach().clone()
    for adapter in module.active_adapters:
        if adapter not in module.lora_A and adapter not in getattr(module, "lora_embedding_A", {}):
            continue
        if module.use_dora.get(adapter, False):
            raise NotImplementedError("DoRA adapters are not supported by the LoRA weight sync")
        merged += module.get_delta_weight(adapter).to(merged.dtype)
    return merged


@torch.no_grad()
def merged_lora_deltas(peft_model: PeftModel) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF weight name, merged weight) for each LoRA-targeted layer only: the per-step rollout sync.

    Each merged tensor is computed when it is requested, so at most one layer's merged copy exists at a
    time (plus whatever the consumer keeps); non-targeted weights never change under LoRA and are not sent.
    Under FSDP the caller must gather full parameters first (verl's `layered_summon` does it per layer).
    """
    for name, module in _lora_layers(peft_model):
        yield f"{name}.weight", _merged_weight(module)


@torch.no_grad()
def merged_named_weights(peft_model: PeftModel) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight with HF names, LoRA-targeted ones merged: what a plain model of the result holds."""
    targeted = lora_targets(peft_model)
    for name, tensor in base_named_weights(peft_model):
        yield name, (_merged_weight(targeted[name]) if name in targeted else tensor)


@torch.no_grad()
def merged_weights_among(peft_model: PeftModel, param_names: list[str], targeted: dict[str, nn.Module],
                         deltas_only: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """The parameters `param_names` (PEFT names, read by name) with HF names, `targeted` ones
    (`lora_targets`) merged; `deltas_only`: the targeted ones only. All of a model's parameters, or one
    FSDP unit's while it is unsharded (`fsdp.unsharded_units`)."""
    for name in param_names:
        if _is_adapter_tensor(name):
            continue
        weight = hf_name(name)
        if weight in targeted:
            yield weight, _merged_weight(targeted[weight])
        elif not deltas_only:
            yield weight, peft_model.get_parameter(name).detach()


def save_adapter(peft_model: PeftModel, out_dir: str, state_dict: dict[str, torch.Tensor] | None = None) -> str:
    """The adapter alone in PEFT format (adapter_config.json + adapter_model.safetensors): MBs, not GBs;
    reload with `apply_lora(..., adapter_path=out_dir)` or `PeftModel.from_pretrained(base, out_dir)`.
    `state_dict`: the PeftModel's full state gathered elsewhere (FSDP-sharded ranks), else its own."""
    extra = {} if state_dict is None else {"state_dict": state_dict}
    peft_model.save_pretrained(out_dir, safe_serialization=True, **extra)
    return out_dir


@torch.no_grad()
def export_merged(peft_model: PeftModel, tokenizer: PreTrainedTokenizerBase | None, out_dir: str) -> str:
    """A plain HF model directory (safetensors) with LoRA merged in, loadable without peft.

    The merged model is built on the meta device and takes the live tensors by reference
    (`assign=True`), so only the targeted layers are copied; `peft_model` is left untouched.
    """
    from transformers import AutoModelForCausalLM

    base = peft_model.get_base_model()
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(base.config, dtype=base.dtype)
    plain.load_state_dict(dict(merged_named_weights(peft_model)), strict=False, assign=True)
    plain.tie_weights()
    _check_no_meta(plain)
    plain.generation_config = base.generation_config
    plain.save_pretrained(out_dir, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    return out_dir


def _check_no_meta(model: nn.Module) -> None:
    missing = [name for name, tensor in model.state_dict().items() if tensor.is_meta]
    if missing:
        raise RuntimeError(f"export_merged: no merged value for {missing[:5]}; the base model's weights "
                           "do not match a fresh model of its config")
