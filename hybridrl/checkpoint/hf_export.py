"""Export a checkpoint to a plain HF model directory (safetensors, config, tokenizer, generation config).

verl users know this as the model merger; `hybridrl export <global_step_dir> <out_dir>`.
"""

from __future__ import annotations

import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

from hybridrl.checkpoint.manager import TRACKER_FILE, CheckpointError, find_resume_dir, step_dirs
from hybridrl.checkpoint.role_files import MODEL_FILE, has_model_weights, read_model_weights
from hybridrl.logging.log import get_logger

HF_SUBDIR = "huggingface"
LORA_ADAPTER_DIR = "lora_adapter"
log = get_logger("hybridrl.checkpoint")


def save_hf_metadata(model, tokenizer, role_dir: str) -> str:
    """config, generation config and tokenizer (always saved, as verl does), without the weights."""
    out = os.path.join(role_dir, HF_SUBDIR)
    os.makedirs(out, exist_ok=True)
    model.config.save_pretrained(out)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def save_hf_model(model, tokenizer, out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    return out_dir


def _role_dir(step_dir: str, role: str) -> str:
    if not os.path.isdir(step_dir):
        raise CheckpointError(f"{step_dir!r} does not exist; pass a global_step_N directory, or the run's checkpoint "
                              f"folder (trainer.default_local_dir) to export its latest step")
    step_dir = _latest_step_if_root(step_dir)
    role_dir = step_dir if has_model_weights(step_dir) else os.path.join(step_dir, role)
    if not has_model_weights(role_dir):
        raise CheckpointError(f"no {MODEL_FILE} under {step_dir!r} (looked in {role_dir!r}); pass a global_step_N "
                              f"directory (or its actor/ or critic/ folder) saved with 'model' in save_contents")
    return role_dir


def _latest_step_if_root(path: str) -> str:
    """A checkpoint folder (global_step_N inside) resolves to its latest complete step, as resume_mode=auto
    finds it; any other directory is returned as it is."""
    if not step_dirs(path):
        return path
    latest = find_resume_dir(path, "auto", None)
    if latest is None:
        raise CheckpointError(f"{path!r} holds global_step_N folders but no {TRACKER_FILE} (no save completed); "
                              f"pass one of them: {[name for _, name in step_dirs(path)][-3:]}")
    log.info("exporting the latest checkpoint in %s: %s", path, os.path.basename(latest))
    return latest


def _export_lora(role_dir: str, meta: str, out_dir: str, adapter_only: bool) -> str:
    """A LoRA checkpoint: the peft adapter as saved, or base + adapter merged into a plain HF model."""
    import shutil

    from hybridrl.models.lora import apply_lora, export_merged

    adapter = os.path.join(role_dir, LORA_ADAPTER_DIR)
    tokenizer = AutoTokenizer.from_pretrained(meta) if os.path.exists(os.path.join(meta, "tokenizer_config.json")) \
        else None
    if adapter_only:
        shutil.copytree(adapter, out_dir, dirs_exist_ok=True)
        return out_dir
    model = apply_lora(AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(meta)), rank=1, alpha=1,
                       target_modules="all-linear", adapter_path=adapter)
    state = read_model_weights(role_dir)
    model.load_state_dict(state, strict=True)
    return export_merged(model, tokenizer, out_dir)


def export_checkpoint(step_dir: str, out_dir: str, role: str = "actor", is_value_model: bool = False,
                      adapter_only: bool = False) -> str:
    """Rebuild the model from `<role>/huggingface/config.json`, load the saved weights, write an HF directory.

    LoRA checkpoints export merged (a plain HF model) or, with `adapter_only`, as the peft adapter.
    """
    role_dir = _role_dir(step_dir, role)
    if os.path.isdir(os.path.join(role_dir, LORA_ADAPTER_DIR)):
        return _export_lora(role_dir, os.path.join(role_dir, HF_SUBDIR), out_dir, adapter_only)
    if adapter_only:
        raise CheckpointError(f"{role_dir} holds no LoRA adapter ({LORA_ADAPTER_DIR}/); drop --adapter-only")
    meta = os.path.join(role_dir, HF_SUBDIR)
    if not os.path.exists(os.path.join(meta, "config.json")):
        raise CheckpointError(f"{meta}/config.json is missing; the checkpoint was not written by hybridrl")
    config = AutoConfig.from_pretrained(meta)
    model_cls = AutoModelForTokenClassification if is_value_model else AutoModelForCausalLM
    with torch.device("meta"):
        model = model_cls.from_config(config)
    state = read_model_weights(role_dir)
    model.load_state_dict(state, strict=True, assign=True)
    if model.config.tie_word_embeddings and hasattr(model, "tie_weights"):
        model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(meta) if os.path.exists(os.path.join(meta, "tokenizer_config.json")) \
        else None
    if os.path.exists(os.path.join(meta, "generation_config.json")):
        from transformers import GenerationConfig

        model.generation_config = GenerationConfig.from_pretrained(meta)
    return save_hf_model(model, tokenizer, out_dir)
