"""RLDataset on real GSM8K parquet and hand-made files: items, truncation, filtering, errors; collate by hand."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from hybridrl.data.dataset import RLDataset, collate, truncate_prompt_ids
from hybridrl.data.errors import DatasetError
from hybridrl.data.parquet import write_parquet
from hybridrl.models.tiny import build_char_tokenizer


def _write_prompts(path, contents: list[str]) -> str:
    rows = [{"prompt": [{"role": "user", "content": c}], "data_source": "arithmetic",
             "reward_model": {"style": "rule", "ground_truth": "0"}, "extra_info": {"split": "train", "index": 10 + i}}
            for i, c in enumerate(contents)]
    return str(write_parquet(rows, path))


def test_gsm8k_item_is_chat_templated_prompt_and_row_fields(gsm8k_parquet_dir, char_tokenizer):
    dataset = RLDataset(str(gsm8k_parquet_dir / "test.parquet"), char_tokenizer, max_prompt_length=1024,
                        return_raw_chat=True)
    assert len(dataset) == 1319
    item = dataset[5]
    question = item["extra_info"]["question"]
    # The char template is contents + "<sep>"; GSM8K instruction appended by the preprocessor.
    expected_text = question + ' Let\'s think step by step and output the final answer after "####".<sep>'
    # One token per character plus one for <sep> (chars outside the toy vocabulary become <unk>).
    assert item["input_ids"].tolist() == char_tokenizer(expected_text, add_special_tokens=False)["input_ids"]
    assert len(item["input_ids"]) == len(expected_text) - len("<sep>") + 1
    assert item["input_ids"].dtype == torch.long and item["input_ids"].dim() == 1
    assert item["raw_prompt"] == [{"role": "user", "content": expected_text[:-len("<sep>")]}]
    assert item["data_source"] == "openai/gsm8k" and item["ability"] == "math"
    assert item["index"] == 5 and item["extra_info"]["split"] == "test"
    assert item["reward_model"]["ground_truth"] == item["extra_info"]["answer"].split("#### ")[-1].replace(",", "")
    assert "prompt" not in item


def test_truncation_modes_cut_the_templated_prompt(tmp_path, char_tokenizer):
    path = _write_prompts(tmp_path / "p.parquet", ["abcdefghij"])  # 10 chars + <sep> = 11 tokens
    sep = "<sep>"
    expected = {"left": "hij" + sep, "right": "abcd", "middle": "ab" + "j" + sep}
    for mode, text in expected.items():
        dataset = RLDataset(path, char_tokenizer, max_prompt_length=4, truncation=mode)
        assert char_tokenizer.decode(dataset[0]["input_ids"]) == text, mode
    with pytest.raises(DatasetError) as error:  # at construction, before any row is used
        RLDataset(path, char_tokenizer, max_prompt_length=4, truncation="error")
    for needle in (path, "row 0", "11 tokens", "data.max_prompt_length=4", "data.filter_overlong_prompts=True",
                   "data.truncation=left"):
        assert needle in str(error.value)


def test_truncate_prompt_ids_middle_odd_length():
    assert truncate_prompt_ids([1, 2, 3, 4, 5, 6], 3, "middle") == [1, 5, 6]
    assert truncate_prompt_ids([1, 2], 3, "error") == [1, 2]


def test_unknown_truncation_mode_is_rejected(tmp_path, char_tokenizer):
    with pytest.raises(ValueError, match="data.truncation='cut'"):
        RLDataset(_write_prompts(tmp_path / "p.parquet", ["a"]), char_tokenizer, truncation="cut")


def test_filter_overlong_prompts_counts_and_keeps_the_rest(tmp_path, char_tokenizer, caplog):
    path = _write_prompts(tmp_path / "p.parquet", ["ab", "abcdef", "abc", "abcdefgh"])  # 3, 7, 4, 9 tokens
    with caplog.at_level(logging.INFO, logger="hybridrl.data"):
        dataset = RLDataset(path, char_tokenizer, max_prompt_length=4, filter_overlong_prompts=True)
    assert dataset.num_filtered == 2 and len(dataset) == 2
    assert [dataset[i]["index"] for i in range(2)] == [10, 12]
    assert "filtered 2 of 4 prompts" in caplog.text


def test_filter_on_real_gsm8k_matches_a_direct_count(gsm8k_parquet_dir, char_tokenizer):
    path = str(gsm8k_parquet_dir / "test.parquet")
    full = RLDataset(path, char_tokenizer, max_prompt_length=10_000)
    lengths = [len(full.prompt_token_ids(i)) for i in range(len(full))]
    filtered = RLDataset(path, char_tokenizer, max_prompt_length=300, filter_overlong_prompts=True)
    assert filtered.num_filtered == sum(length > 300 for length in lengths) > 0
    assert len(filtered) + filtered.num_filtered == 1319


def test_missing_prompt_names_file_row_and_column(tmp_path, char_tokenizer):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "1+1="}) + "\n" + json.dumps({"question": "2+2="}) + "\n")
    with pytest.raises(ValueError) as error:
        RLDataset(str(path), char_tokenizer)
    assert str(path) in str(error.value) and "row 1" in str(error.value) and "'prompt'" in str(error.value)
    assert "data.prompt_key" in str(error.value)


def test_rows_with_images_or_videos_are_refused_not_trained_on_as_text(tmp_path, char_tokenizer):
    rows = [{"prompt": "1+1=", "images": []}, {"prompt": "<image> what is this?", "images": [{"bytes": b"\x89PNG"}]}]
    path = write_parquet(rows, tmp_path / "vl.parquet")
    with pytest.raises(ValueError, match=r"row 1 has media in column 'images'.*not supported"):
        RLDataset(str(path), char_tokenizer)
    clip = tmp_path / "clip.jsonl"
    clip.write_text(json.dumps({"prompt": "describe", "clips": "a.mp4"}) + "\n")
    with pytest.raises(ValueError, match="row 0 has media in column 'clips'"):
        RLDataset(str(clip), char_tokenizer, media_keys=("images", "clips"))  # data.video_key=clips
    empty = write_parquet([{"prompt": "1+1=", "images": None, "videos": []}], tmp_path / "text.parquet")
    assert len(RLDataset(str(empty), char_tokenizer)) == 1  # empty media cells are text-only rows


def test_malformed_messages_are_an_error(tmp_path, char_tokenizer):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "user"}]}) + "\n")
    with pytest.raises(ValueError, match="row 0 column 'prompt' must be a string or a list"):
        RLDataset(str(path), char_tokenizer)


def test_string_prompt_jsonl_and_files_concatenate(tmp_path, gsm8k_dir, char_tokenizer):
    path = _write_prompts(tmp_path / "p.parquet", ["xy"])
    # GSM8K jsonl rows hold a plain string under "question": one user message, index = row number.
    dataset = RLDataset(str(gsm8k_dir / "test.jsonl"), char_tokenizer, prompt_key="question", max_prompt_length=2048,
                        return_raw_chat=True)
    assert dataset[3]["raw_prompt"] == [{"role": "user", "content": dataset.rows[3]["question"]}]
    assert dataset[3]["index"] == 3 and dataset[3]["data_source"] is None
    both = RLDataset([path, path], char_tokenizer)
    assert len(both) == 2 and both.origins == [(path, 0), (path, 0)]


def test_max_samples_is_a_seeded_subset(gsm8k_parquet_dir, char_tokenizer):
    path = str(gsm8k_parquet_dir / "test.parquet")
    first = RLDataset(path, char_tokenizer, max_samples=50, seed=1, max_prompt_length=2048)
    again = RLDataset(path, char_tokenizer, max_samples=50, seed=1, max_prompt_length=2048)
    other = RLDataset(path, char_tokenizer, max_samples=50, seed=2, max_prompt_length=2048)
    indices = [row["extra_info"]["index"] for row in first.rows]
    assert len(first) == 50 and len(set(indices)) == 50
    assert indices == [row["extra_info"]["index"] for row in again.rows]
    assert indices != [row["extra_info"]["index"] for row in other.rows]
    assert indices != list(range(50))  # random, not the head of the file
    assert len(RLDataset(path, char_tokenizer, max_samples=-1, max_prompt_length=2048)) == 1319


def test_no_chat_template_joins_contents_with_newlines(tmp_path, caplog):
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = None
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "system", "content": "ab"}, {"role": "user", "content": "cd"}]}))
    with caplog.at_level(logging.WARNING, logger="hybridrl.data"):
        dataset = RLDataset(str(path), tokenizer)
        assert tokenizer.decode(dataset[0]["input_ids"]) == "ab\ncd"
    assert "no chat template" in caplog.text


def test_apply_chat_template_kwargs_reach_the_template(tmp_path):
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = "{% if shout %}!{% endif %}{{ messages[0]['content'] }}"
    path = _write_prompts(tmp_path / "p.parquet", ["ab"])
    shouted = RLDataset(path, tokenizer, apply_chat_template_kwargs={"shout": True})
    assert tokenizer.decode(shouted[0]["input_ids"]) == "!ab"
    assert tokenizer.decode(RLDataset(path, tokenizer)[0]["input_ids"]) == "ab"


def test_collate_left_pads_with_hand_computed_positions():
    rows = [{"input_ids": torch.tensor([5, 6]), "data_source": "a", "extra_info": {"index": 0}},
            {"input_ids": torch.tensor([7, 8, 9]), "data_source": "b",
             "raw_prompt": [{"role": "user", "content": "x"}]},
            {"input_ids": torch.tensor([], dtype=torch.long), "data_source": "c"}]
    batch = collate(rows, pad_token_id=0, max_prompt_length=4)
    assert batch["input_ids"].tolist() == [[0, 0, 5, 6], [0, 7, 8, 9], [0, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 0, 0, 1], [0, 0, 1, 2], [0, 0, 0, 0]]
    assert list(batch["data_source"]) == ["a", "b", "c"]
    assert list(batch["extra_info"]) == [{"index": 0}, None, None]
    assert batch["raw_prompt"][1] == [{"role": "user", "content": "x"}] and batch["raw_prompt"].shape == (3,)


def test_collate_rejects_rows_longer_than_the_pad_length():
    with pytest.raises(ValueError, match="3 prompt tokens.*max_prompt_length=2"):
        collate([{"input_ids": [1, 2, 3]}], pad_token_id=0, max_prompt_length=2)


def test_dataset_collate_fn_on_real_rows(gsm8k_parquet_dir, char_tokenizer):
    dataset = RLDataset(str(gsm8k_parquet_dir / "train.parquet"), char_tokenizer, max_prompt_length=512,
                        truncation="left")
    batch = dataset.collate_fn()([dataset[0], dataset[1]])
    lengths = [len(dataset[0]["input_ids"]), len(dataset[1]["input_ids"])]
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths
    assert batch["input_ids"][0, -lengths[0]:].tolist() == dataset[0]["input_ids"].tolist()
    assert (batch["input_ids"][0, :512 - lengths[0]] == char_tokenizer.pad_token_id).all()
    assert set(batch.non_tensors) >= {"data_source", "reward_model", "extra_info", "index", "ability"}


def test_every_unusable_row_is_listed_at_construction(tmp_path, char_tokenizer):
    """One error names every overlong prompt and every row a reward function could not score, with the fix."""
    rows = [{"prompt": "ab", "reward_model": {"style": "rule", "ground_truth": "1"}},
            {"prompt": "abcdefgh", "reward_model": {"style": "rule", "ground_truth": "2"}},  # 9 tokens: overlong
            {"prompt": "cd", "reward_model": None},
            {"prompt": "ef", "reward_model": {"style": "rule"}},
            {"prompt": "gh", "reward_model": {"style": "model"}}]  # a reward model scores it: no ground truth needed
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    with pytest.raises(DatasetError) as error:
        RLDataset(str(path), char_tokenizer, max_prompt_length=4, require_ground_truth=True)
    message = str(error.value)
    assert "1 of 5 prompts longer than data.max_prompt_length=4" in message and "row 1: 9 tokens" in message
    assert "1 of 5 rows without a `reward_model` dict" in message and "row 2: reward_model is None" in message
    assert "1 of 5 rows without reward_model.ground_truth" in message and "row 3:" in message
    assert "row 4" not in message and "row 0" not in message
    dataset = RLDataset(str(path), char_tokenizer, max_prompt_length=4, truncation="left")  # no reward checks
    assert dataset.prompt_lengths == [3, 9, 3, 3, 3]


def test_prompt_lengths_follow_filtering_and_subsets(tmp_path, char_tokenizer):
    path = _write_prompts(tmp_path / "p.parquet", ["ab", "abcdef", "abc", "abcdefgh"])  # 3, 7, 4, 9 tokens
    dataset = RLDataset(path, char_tokenizer, max_prompt_length=4, filter_overlong_prompts=True)
    assert dataset.prompt_lengths == [3, 4]
    assert [len(dataset[i]["input_ids"]) for i in range(len(dataset))] == dataset.prompt_lengths


def test_empty_and_unreadable_files_are_dataset_errors(tmp_path, char_tokenizer):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DatasetError, match="hold no rows"):
        RLDataset(str(empty), char_tokenizer)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(DatasetError, match="not a readable parquet file"):
        RLDataset(str(broken), char_tokenizer)
