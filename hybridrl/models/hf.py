"""Loading HF causal LMs, value models and tokenizers from `model.path` (a local directory or hub id)."""

from __future__ import annotations

import importlib
import os

import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer,
                          PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast)
from transformers.utils import logging as hf_logging

from hybridrl.logging.log import get_logger
from hybridrl.models.attention import use_shape_agnostic_sdpa
from hybridrl.models.errors import ModelLoadError
from hybridrl.models.shm import load_path
from hybridrl.utils.collectives import is_rank0
from hybridrl.utils.scoped import temporarily

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}
log = get_logger("hybridrl.models")


def _quiet_transformers() -> None:
    """Per-file progress bars from transformers flood logs of a training run; keep its warnings."""
    hf_logging.disable_progress_bar()


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; use one of {sorted(DTYPES)}")
    return DTYPES[name]


def expand_path(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def _source(path: str, use_shm: bool, key: str) -> str:
    """Where a model loads from: `path` expanded, or its /dev/shm copy when the role's use_shm is set."""
    return load_path(expand_path(path), use_shm, use_shm_key=key.rsplit(".", 1)[0] + ".use_shm", source_key=key)


def _load_error(kind: str, path: str, key: str, err: Exception) -> ModelLoadError:
    hint = ("the directory exists but is not a complete HF model directory (config.json, weights, tokenizer)"
            if os.path.isdir(path) else
            "no such local directory; hub ids need network access or a populated HF cache")
    return ModelLoadError(f"could not load the {kind} from {key}={path!r}: {hint}. "
                          f"Point {key} at a local HF model directory. (cause: {type(err).__name__}: {err})")


def load_tokenizer(path: str, *, trust_remote_code: bool = False,
                   key: str = "actor_rollout_ref.model.tokenizer_path",
                   chat_template: str | None = None) -> PreTrainedTokenizerBase:
    """Tokenizer with a pad token (falls back to EOS, as verl does) and left padding for prompts;
    `chat_template` (a Jinja string) replaces the tokenizer's own."""
    path = expand_path(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise _load_error("tokenizer", path, key, err) from err
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def load_policy_tokenizer(model_cfg, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """The policy's tokenizer from `actor_rollout_ref.model`: its external_lib imported first, tokenizer_path
    (else path) and custom_chat_template applied; tokenizer code trusted when the model's trust_remote_code
    or `trust_remote_code` (verl's data.trust_remote_code, which verl's tokenizer loading reads) is set."""
    import_external_lib(model_cfg.external_lib, "actor_rollout_ref.model.external_lib")
    key = "actor_rollout_ref.model." + ("tokenizer_path" if model_cfg.tokenizer_path else "path")
    return load_tokenizer(model_cfg.tokenizer_path or model_cfg.path,
                          trust_remote_code=model_cfg.trust_remote_code or trust_remote_code,
                          key=key, chat_template=model_cfg.custom_chat_template)


def batch_decode(tokenizer: PreTrainedTokenizerBase, rows: list[list[int]], skip_special_tokens: bool = True
                 ) -> list[str]:
    """`tokenizer.batch_decode(rows)`, through the Rust backend's `decode_batch` when that is what it would run.

    transformers checks every token id in Python and decodes row by row, holding the GIL: ~50 ms for 512
    rows of 256 tokens on the 2-core box, during which the controller's main thread (launching kernels,
    reading rank replies) waits for the GIL behind the reward thread. `decode_batch` gives the same strings
    in ~19 ms without the GIL. Tokenizers that clean up spaces or decode their own way keep the slow path.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or tokenizer.clean_up_tokenization_spaces \
            or type(tokenizer)._decode is not PreTrainedTokenizerFast._decode:
        return tokenizer.batch_decode(rows, skip_special_tokens=skip_special_tokens)
    return backend.decode_batch(rows, skip_special_tokens=skip_special_tokens)


def import_external_lib(module: str | None, key: str) -> None:
    """verl's `<role>.model.external_lib`: import a module (which registers custom architectures or tokenizers
    with transformers' Auto classes) before that role's model loads."""
    if not module:
        return
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ModelLoadError(f"{key}={module!r} could not be imported ({type(err).__name__}: {err}); install it, "
                             "put it on PYTHONPATH, or set the key to null") from err


def load_causal_lm(path: str, *, dtype: torch.dtype = torch.float32, override_config: dict | None = None,
                   trust_remote_code: bool = False, attn_implementation: str = "sdpa",
                   key: str = "actor_rollout_ref.model.path", hf_config_path: str | None = None,
                   tokenizer_path: str | None = None, use_shm: bool = False,
                   fp32_residual: bool = True, batch_invariant: bool = False) -> PreTrainedModel:
    """An HF causal LM from an HF directory, or from a Megatron-LM checkpoint directory (detected); with
    `use_shm` (the role's `model.use_shm`) from its copy in /dev/shm (`models/shm.py`).

    `fp32_residual`: forwards that compute in bf16/fp16 keep the residual stream in fp32, the numerics the
    rollout engine shares (numerics.py); False leaves HF's plain forward. `batch_invariant`: also the engine's
    batch-invariant kernels (`actor_rollout_ref.model.batch_invariant`, models/invariant).
    """
    path = _source(path, use_shm, key)
    _quiet_transformers()
    from hybridrl.models.megatron import is_megatron_checkpoint, load_megatron_as_hf
    from hybridrl.models.numerics import keep_residual_stream_fp32

    if is_megatron_checkpoint(path):
        model = load_megatron_as_hf(path, hf_config_path=hf_config_path, dtype=dtype, tokenizer_path=tokenizer_path,
                                    override_config=override_config, attn_implementation=attn_implementation)
    else:
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, **(override_config or {}))
            model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype,
                                                         trust_remote_code=trust_remote_code,
                                                         attn_implementation=attn_implementation)
        except (OSError, ValueError) as err:
            raise _load_error("causal LM", path, key, err) from err
    if fp32_residual:
        keep_residual_stream_fp32(model)
    if batch_invariant:
        from hybridrl.models.invariant.hf import use_batch_invariant_numerics

        use_batch_invariant_numerics(model)
    use_shape_agnostic_sdpa(model)
    return model


def load_value_model(path: str, *, dtype: torch.dtype = torch.float32, override_config: dict | None = None,
                     trust_remote_code: bool = False, key: str = "critic.model.path",
                     use_shm: bool = False) -> PreTrainedModel:
    """A token-classification model with one label: the value head on an HF backbone (verl's critic).

    The score head is freshly initialised when loading a causal-LM checkpoint (expected for a critic). With
    `use_shm` (the role's `model.use_shm`) it loads from the checkpoint's copy in /dev/shm (`models/shm.py`).
    """
    path = _source(path, use_shm, key)
    _quiet_transformers()
    from hybridrl.models.megatron import is_megatron_checkpoint

    if is_megatron_checkpoint(path):
        model = _value_model_from_megatron(path, dtype, override_config)
    else:
        model = _value_model_from_hf(path, dtype, override_config, trust_remote_code, key)
    use_shape_agnostic_sdpa(model)
    return model


def _value_model_from_hf(path: str, dtype: torch.dtype, override_config: dict | None, trust_remote_code: bool,
                         key: str) -> PreTrainedModel:
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, **(override_config or {}))
        config.num_labels = 1
        config.classifier_dropout = 0.0
        # transformers' load report would call the fresh head MISSING: _report_value_head says what it means
        with temporarily(hf_logging.get_verbosity, hf_logging.set_verbosity, hf_logging.ERROR):
            model, info = AutoModelForTokenClassification.from_pretrained(
                path, config=config, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa",
                output_loading_info=True)
    except (OSError, ValueError) as err:
        raise _load_error("value model", path, key, err) from err
    _report_value_head(info, path, key)
    return model


def _report_value_head(info: dict, path: str, key: str) -> None:
    """A fresh score head is expected for a critic started from a causal LM (one info line) and wrong for a reward
    model (a warning naming its key). Any other missing or unexpected weight is a warning naming them."""
    missing = sorted(info.get("missing_keys", ()))
    head = [k for k in missing if k.split(".")[0] == "score"]
    others, unexpected = [k for k in missing if k not in head], sorted(info.get("unexpected_keys", ()))
    if not is_rank0():  # every rank of a group loads the same checkpoint
        return
    if head and key.startswith("reward_model."):  # a reward model must come trained: these rewards are noise
        log.warning("%s=%s has no trained score head (%s starts freshly initialised): its rewards are random; point "
                    "%s at a trained reward model (a token-classification checkpoint with one label)", key, path,
                    ", ".join(head), key)
    elif head:
        log.info("value model from %s: its score head (%s) starts freshly initialised, as a critic started from a "
                 "causal LM does", path, ", ".join(head))
    if others or unexpected:
        log.warning("value model from %s=%s: weights not in the checkpoint (initialised fresh): %s; checkpoint "
                    "weights the model does not use: %s", key, path, others or "none", unexpected or "none")


def unwrap_peft(model: torch.nn.Module) -> torch.nn.Module:
    """The HF model inside a PEFT wrapper (LoRA layers stay injected in it), else the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_of(model: PreTrainedModel) -> torch.nn.Module:
    """The transformer body (without the LM head) of an HF model (PEFT-wrapped or not)."""
    model = unwrap_peft(model)
    body = getattr(model, model.base_model_prefix, None)
    if body is None:
        raise ValueError(f"{type(model).__name__} has no base model attribute {model.base_model_prefix!r}")
    return body


def _value_model_from_megatron(path: str, dtype: torch.dtype, override_config: dict | None) -> PreTrainedModel:
    """A critic initialised from a Megatron-LM checkpoint: its body, plus a fresh one-label score head."""
    from hybridrl.models.megatron import load_megatron_hf_state_dict

    config, state = load_megatron_hf_state_dict(path)
    for key, value in (override_config or {}).items():
        setattr(config, key, value)
    config.num_labels = 1
    model = AutoModelForTokenClassification.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    bad = [k for k in missing if not k.startswith("score.")] + list(unexpected)
    if bad:
        raise ModelLoadError(f"the Megatron checkpoint at {path} does not match a value model: {bad[:5]}")
    return model


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """Non-reentrant activation checkpointing of every decoder layer (`model.enable_gradient_checkpointing`).

    transformers 5 renamed `gradient_checkpointing_enable` (now a deprecated alias that warns) to
    `activation_checkpointing_enable`; older releases only have the former."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
