"""The run's datasets and train sampler from `data.*`: hybridrl's `RLDataset`, or a user's class
(`data.custom_cls`), a user's sampler (`data.sampler`), and `data.use_shm`.

A user dataset class is built the way its base expects:

- a subclass of hybridrl's `RLDataset` exactly as `RLDataset` is (files, tokenizer and the keyword arguments of
  `rl_dataset_kwargs`); its items are hybridrl's already;
- any other class as verl builds one, `cls(data_files=, tokenizer=, config=, processor=None, max_samples=)`
  (keywords it does not take are left out), with `config` the `data.*` section as a DictConfig (attribute and
  `.get` access, as verl's RLHFDataset reads it); its rows are read through `VerlRows`.

A sampler is built as verl builds one, `cls(data_source=dataset, data_config=config)`, and drives the train
loader's order (`loader.StatefulLoader`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config.schema_data import DataConfig
from hybridrl.data.dataset import RLDataset
from hybridrl.data.errors import DatasetError
from hybridrl.data.loader import Rows
from hybridrl.data.sampler_order import IndexSampler
from hybridrl.data.user_code import accepted_keywords, load_user_class
from hybridrl.data.verl_rows import VerlRows, max_samples_selection
from hybridrl.models.shm import load_path

logger = logging.getLogger("hybridrl.data")


def verl_data_config(data_cfg: DataConfig) -> DictConfig:
    """A copy of `data.*` as verl's classes receive it: `config.max_prompt_length`, `config.get("cache_dir")`."""
    return OmegaConf.create(dataclasses.asdict(data_cfg))


def rl_dataset_kwargs(data_cfg: DataConfig, split: str, seed: int | None) -> dict[str, Any]:
    """RLDataset's keyword arguments for `split` ("train" or "val")."""
    return dict(max_prompt_length=data_cfg.max_prompt_length, prompt_key=data_cfg.prompt_key,
                reward_fn_key=data_cfg.reward_fn_key, truncation=data_cfg.truncation,
                filter_overlong_prompts=data_cfg.filter_overlong_prompts, max_samples=_max_samples(data_cfg, split),
                return_raw_chat=data_cfg.return_raw_chat,
                apply_chat_template_kwargs=data_cfg.apply_chat_template_kwargs,
                seed=seed, media_keys=(data_cfg.image_key, data_cfg.video_key),
                require_ground_truth=True)  # the reward step reads reward_model.ground_truth of every row


def build_rl_dataset(data_cfg: DataConfig, files: list[str | Path], tokenizer: Any, split: str,
                     seed: int | None) -> Rows:
    """The `split` dataset: data.custom_cls when set, else RLDataset; files copied to /dev/shm with data.use_shm."""
    local: list[str | Path] = [load_path(str(f), data_cfg.use_shm, use_shm_key="data.use_shm",
                                         source_key=f"data.{split}_files") for f in files]
    custom = data_cfg.custom_cls
    if not custom.path:
        return RLDataset(local, tokenizer, **rl_dataset_kwargs(data_cfg, split, seed))
    cls = load_user_class(custom.path, custom.name, path_key="data.custom_cls.path", name_key="data.custom_cls.name")
    label = f"data.custom_cls {cls.__name__} ({custom.path})"
    logger.info("%s dataset: %s", split, label)
    if issubclass(cls, RLDataset):
        return _rl_dataset_subclass(cls, label, data_cfg, local, tokenizer, split, seed)
    return _verl_style_dataset(cls, label, data_cfg, local, tokenizer, split, seed)


def _rl_dataset_subclass(cls: type, label: str, data_cfg: DataConfig, files: list[str | Path], tokenizer: Any,
                         split: str, seed: int | None) -> RLDataset:
    try:
        return cls(files, tokenizer, **rl_dataset_kwargs(data_cfg, split, seed))
    except DatasetError:
        raise  # RLDataset's own errors name the file, row and key already
    except Exception as error:
        raise DatasetError(f"building {label}, a subclass of RLDataset, as RLDataset is built (files, tokenizer, "
                           f"{', '.join(rl_dataset_kwargs(data_cfg, split, seed))}) failed: {type(error).__name__}: "
                           f"{error}") from error


def _verl_style_dataset(cls: type, label: str, data_cfg: DataConfig, files: list[str | Path], tokenizer: Any,
                        split: str, seed: int | None) -> VerlRows:
    max_samples = _max_samples(data_cfg, split)
    offered = {"data_files": files, "tokenizer": tokenizer, "config": verl_data_config(data_cfg), "processor": None,
               "max_samples": max_samples}
    kwargs = accepted_keywords(cls, offered)
    missing = [name for name in ("data_files", "tokenizer") if name not in kwargs]
    if missing:
        raise DatasetError(f"{label} does not take {', '.join(missing)}: hybridrl builds it as verl does, "
                           "cls(data_files=, tokenizer=, config=, processor=, max_samples=); give __init__ those "
                           "parameters (or subclass hybridrl.data.dataset.RLDataset)")
    try:
        inner = cls(**kwargs)
    except Exception as error:
        raise DatasetError(f"building {label} for the {split} files {files} failed: {type(error).__name__}: "
                           f"{error}") from error
    # A class that kept more rows than data.*_max_samples (it has no such parameter, or ignores it) is subsampled
    # here, as RLDataset subsamples: the setting is applied, not dropped.
    keep = max_samples_selection(len(inner), max_samples, seed)
    if keep is not None:
        logger.info("%s returned %d rows; data.%s_max_samples=%d keeps a seeded subset of them", label, len(inner),
                    split, max_samples)
    return VerlRows(inner, tokenizer, data_cfg, label=label, keep=keep)


def build_sampler(data_cfg: DataConfig, dataset: Rows) -> IndexSampler | None:
    """data.sampler's class built on the train dataset (the user's own object for a verl-style class), or None."""
    sampler_cfg = data_cfg.sampler
    if not sampler_cfg.class_path:
        return None
    cls = load_user_class(sampler_cfg.class_path, sampler_cfg.class_name, path_key="data.sampler.class_path",
                          name_key="data.sampler.class_name")
    label = f"data.sampler {cls.__name__} ({sampler_cfg.class_path})"
    source = dataset.inner if isinstance(dataset, VerlRows) and dataset.keep is None else dataset
    try:
        sampler = cls(data_source=source, data_config=verl_data_config(data_cfg))
    except Exception as error:
        raise DatasetError(f"building {label} as verl does, cls(data_source=dataset, data_config=config), failed: "
                           f"{type(error).__name__}: {error}") from error
    if not (hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
        raise DatasetError(f"{label} has no __iter__ / __len__; a sampler yields row indices (torch's Sampler)")
    logger.info("train order: %s%s", label, " (curriculum: update(batch) after each step)"
                if callable(getattr(sampler, "update", None)) else "")
    return sampler


def _max_samples(data_cfg: DataConfig, split: str) -> int:
    return data_cfg.train_max_samples if split == "train" else data_cfg.val_max_samples
