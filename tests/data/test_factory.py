"""data.custom_cls: a user's dataset class (verl's contract, or a subclass of RLDataset) built from the config and
read as hybridrl's rows, on real GSM8K rows; the config view verl's classes read; errors that name the class."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.config.input_paths import missing_paths
from hybridrl.data.dataset import RLDataset, collate
from hybridrl.data.errors import DatasetError
from hybridrl.data.factory import build_rl_dataset, rl_dataset_kwargs, verl_data_config
from hybridrl.data.parquet import read_rows, write_parquet
from hybridrl.data.verl_rows import VerlRows

USER_CLASSES = Path(__file__).parent / "user_classes"
VERL_STYLE = str(USER_CLASSES / "verl_style.py")


@pytest.fixture(scope="module")
def gsm8k_file(gsm8k_parquet_dir, tmp_path_factory) -> str:
    """The first 12 rows of the real GSM8K test split (rows 5 and up keep their extra_info.index)."""
    rows = read_rows(gsm8k_parquet_dir / "test.parquet")[:12]
    return str(write_parquet(rows, tmp_path_factory.mktemp("gsm8k12") / "test.parquet"))


def _data_cfg(*overrides: str, path: str = VERL_STYLE, name: str | None = None):
    extra = [f"data.custom_cls.path={path}", f"data.custom_cls.name={name}"] if name else []
    return load_config(["data.max_prompt_length=1024", *extra, *overrides]).data


def _build(data_cfg, files, tokenizer, split="train"):
    return build_rl_dataset(data_cfg, files, tokenizer, split, seed=1)


def test_a_verl_class_gives_the_rows_rldataset_gives(gsm8k_file, char_tokenizer):
    ours = _build(_data_cfg(), [gsm8k_file], char_tokenizer)
    theirs = _build(_data_cfg(name="RawPromptDataset"), [gsm8k_file], char_tokenizer)
    assert isinstance(ours, RLDataset) and isinstance(theirs, VerlRows) and len(theirs) == len(ours) == 12
    for i in (0, 7):
        mine, verls = ours[i], theirs[i]
        assert verls["input_ids"].tolist() == mine["input_ids"].tolist()
        for key in ("raw_prompt", "data_source", "reward_model", "extra_info", "index"):
            assert verls[key] == mine[key], key
        assert "dummy_tensor" not in verls and verls["tools_kwargs"] == {}
    batch = collate([theirs[0], theirs[1]], pad_token_id=0, max_prompt_length=1024)
    assert batch["input_ids"].shape == (2, 1024) and list(batch["index"]) == [0, 1]


def test_padded_rows_of_older_verl_lose_their_padding(gsm8k_file, char_tokenizer):
    ours = _build(_data_cfg(), [gsm8k_file], char_tokenizer)
    theirs = _build(_data_cfg(name="PaddedPromptDataset"), [gsm8k_file], char_tokenizer)
    item = theirs[3]
    assert item["input_ids"].tolist() == ours[3]["input_ids"].tolist()
    assert not {"attention_mask", "position_ids", "raw_prompt_ids", "prompt", "raw_prompt"} & set(item)
    assert item["data_source"] == "openai/gsm8k"


def test_max_samples_reaches_a_class_that_cannot_subsample(gsm8k_file, char_tokenizer):
    taking = _build(_data_cfg("data.train_max_samples=5", name="RawPromptDataset"), [gsm8k_file], char_tokenizer)
    assert len(taking) == 5 and taking.keep is None  # the class took max_samples itself
    not_taking = _build(_data_cfg("data.train_max_samples=5", name="PaddedPromptDataset"), [gsm8k_file],
                        char_tokenizer)
    assert len(not_taking) == 5 and len(not_taking.inner) == 12  # it takes **kwargs but ignores max_samples
    assert not_taking.keep == sorted(not_taking.keep) and len(set(not_taking.keep)) == 5


def test_a_subclass_of_rldataset_is_built_as_rldataset_is(gsm8k_file, char_tokenizer):
    data_cfg = _data_cfg(path=str(USER_CLASSES / "hybridrl_subclass.py"), name="SystemPromptDataset")
    dataset = _build(data_cfg, [gsm8k_file], char_tokenizer)
    assert type(dataset).__name__ == "SystemPromptDataset" and isinstance(dataset, RLDataset)
    assert dataset.max_prompt_length == rl_dataset_kwargs(data_cfg, "train", 1)["max_prompt_length"] == 1024
    item = dataset[0]
    assert item["raw_prompt"][0] == {"role": "system", "content": "Answer briefly."}
    text = char_tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
    assert item["input_ids"].tolist() == char_tokenizer(text, add_special_tokens=False)["input_ids"]


def test_pkg_module_paths_load_like_verls(gsm8k_file, char_tokenizer, monkeypatch):
    monkeypatch.syspath_prepend(str(USER_CLASSES))
    dataset = _build(_data_cfg(path="pkg://verl_style", name="RawPromptDataset"), [gsm8k_file], char_tokenizer)
    assert len(dataset) == 12


def test_the_config_view_reads_like_verls_data_config():
    view = verl_data_config(_data_cfg("data.prompt_key=question"))
    assert view.prompt_key == "question" and view.get("max_prompt_length") == 1024
    assert view.get("chat_template_func", None) is None and "custom_cls" in view
    assert view.custom_cls.get("path", "unset") is None and view.sampler.class_name is None


@pytest.mark.parametrize("name,needles", [
    ("NoSuchDataset", ["data.custom_cls.name='NoSuchDataset'", "classes there:", "RawPromptDataset"]),
    ("GrowingDataset", ["GrowingDataset", "on_batch_end", "data.train_files"]),
    ("NoGroundTruthDataset", ["NoGroundTruthDataset", "row 0", "reward_model.ground_truth"]),
])
def test_unusable_classes_are_named_with_the_fix(gsm8k_file, char_tokenizer, name, needles):
    with pytest.raises(DatasetError) as error:
        _build(_data_cfg(name=name), [gsm8k_file], char_tokenizer)
    for needle in needles:
        assert needle in str(error.value)


def test_a_file_that_imports_verl_says_verl_is_not_needed(gsm8k_file, char_tokenizer):
    with pytest.raises(DatasetError, match="imports verl, which hybridrl does not install") as error:
        _build(_data_cfg(path=str(USER_CLASSES / "imports_verl.py"), name="CustomRLHFDataset"), [gsm8k_file],
               char_tokenizer)
    assert "imports_verl.py" in str(error.value)


def test_a_missing_file_and_a_missing_name_are_config_errors(tmp_path):
    missing = str(tmp_path / "nowhere.py")
    with pytest.raises(DatasetError, match="is not a file"):
        _build(_data_cfg(path=missing, name="X"), [], None)
    problems = missing_paths(load_config([f"data.custom_cls.path={missing}", "data.custom_cls.name=X",
                                          "data.sampler.class_path=pkg://some.module", "data.sampler.class_name=S"]))
    assert f"data.custom_cls.path={missing!r}: no such file" in problems  # pkg:// modules are found on import
    assert not [p for p in problems if "data.sampler" in p]
    with pytest.raises(ConfigError, match="data.custom_cls.path='my.py' needs data.custom_cls.name"):
        validate_config(load_config(["data.custom_cls.path=my.py"]))
    with pytest.raises(ConfigError, match="data.sampler.class_path='s.py' needs data.sampler.class_name"):
        validate_config(load_config(["data.sampler.class_path=s.py"]))


def test_an_overlong_row_follows_data_truncation(tmp_path, char_tokenizer):
    rows = [{"prompt": [{"role": "user", "content": "abcdefghij"}], "data_source": "toy",
             "reward_model": {"style": "rule", "ground_truth": "1"}, "extra_info": {"index": 3}}] * 2
    file = str(write_parquet(rows, tmp_path / "long.parquet"))
    cut = _build(_data_cfg("data.max_prompt_length=4", "data.truncation=left", name="RawPromptDataset"), [file],
                 char_tokenizer)
    assert char_tokenizer.decode(cut[1]["input_ids"]) == "hij<sep>" and cut[1]["index"] == 3
    with pytest.raises(DatasetError, match=r"row 0 has a prompt of 11 tokens, longer than data.max_prompt_length=4"):
        _build(_data_cfg("data.max_prompt_length=4", name="RawPromptDataset"), [file], char_tokenizer)


def test_verl_rows_stay_unpadded_tensors(gsm8k_file, char_tokenizer):
    item = _build(_data_cfg(name="PaddedPromptDataset"), [gsm8k_file], char_tokenizer)[0]
    assert item["input_ids"].dtype == torch.long and item["input_ids"].dim() == 1
