"""StatefulLoader: deterministic epochs, resume mid-epoch and at an epoch boundary equal to straight iteration."""

from __future__ import annotations

import pytest
import torch

from hybridrl.data.dataset import RLDataset
from hybridrl.data.loader import StatefulLoader
from hybridrl.utils.batch import Batch


def _rows_collate(rows: list[int]) -> Batch:
    return Batch(tensors={"row": torch.tensor(rows)})


def _loader(size: int = 10, batch_size: int = 3, **kwargs) -> StatefulLoader:
    return StatefulLoader(list(range(size)), batch_size, collate_fn=_rows_collate, **kwargs)


def _take(loader: StatefulLoader, num_batches: int) -> list[tuple[list[int], int]]:
    taken = []
    for _ in range(num_batches):
        batch, epoch = loader.next_batch()
        taken.append((batch["row"].tolist(), epoch))
    return taken


def test_len_counts_batches_per_epoch():
    assert len(_loader(10, 3)) == 3
    assert len(_loader(10, 3, drop_last=False)) == 4
    assert len(_loader(9, 3)) == 3


def test_epoch_is_a_permutation_and_epochs_differ():
    loader = _loader(10, 5, shuffle=True, seed=7)
    epoch0 = _take(loader, 2)
    epoch1 = _take(loader, 2)
    assert sorted(epoch0[0][0] + epoch0[1][0]) == list(range(10))
    assert [e for _, e in epoch0 + epoch1] == [0, 0, 1, 1]
    assert epoch0[0][0] + epoch0[1][0] != epoch1[0][0] + epoch1[1][0]
    assert _take(_loader(10, 5, seed=7), 2) == epoch0  # same seed, same order
    assert _take(_loader(10, 5, seed=8), 2) != epoch0


def test_no_shuffle_keeps_file_order_and_drop_last_false_keeps_the_tail():
    loader = _loader(7, 3, shuffle=False, drop_last=False)
    assert [rows for rows, _ in _take(loader, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert loader.state_dict() == {"epoch": 1, "batch_index": 0, "seed": 0}


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4, 6])  # 3 batches per epoch: 3 and 6 are epoch boundaries
def test_resume_equals_uninterrupted_iteration(stop_after):
    straight = _take(_loader(10, 3, seed=3), 8)
    first = _loader(10, 3, seed=3)
    head = _take(first, stop_after)
    resumed = _loader(10, 3, seed=3)
    resumed.load_state_dict(dict(first.state_dict()))
    assert head + _take(resumed, 8 - stop_after) == straight


def test_state_at_epoch_end_points_at_next_epoch():
    loader = _loader(10, 3)
    _take(loader, 3)
    assert loader.state_dict() == {"epoch": 1, "batch_index": 0, "seed": 0}
    # A state written as "epoch 0, all 3 batches done" (verl's 0-step resume, PR #5725) also starts epoch 1.
    other = _loader(10, 3)
    other.load_state_dict({"epoch": 0, "batch_index": 3, "seed": 0})
    assert other.state_dict()["epoch"] == 1 and _take(other, 1) == _take(_loader(10, 3), 4)[3:]


def test_iteration_runs_the_rest_of_the_current_epoch():
    loader = _loader(10, 3, seed=1)
    loader.next_batch()
    assert len(list(loader)) == 2 and loader.epoch == 1
    assert len(list(loader)) == 3 and loader.epoch == 2


def test_bad_states_and_sizes_are_errors():
    with pytest.raises(ValueError, match=r"data.train_batch_size=11 is larger than the dataset \(10 rows\)"):
        _loader(10, 11)
    with pytest.raises(ValueError, match="batch_index=5"):
        _loader(10, 3).load_state_dict({"epoch": 0, "batch_index": 5, "seed": 0})


def test_checkpoint_seed_wins_on_resume(caplog):
    straight = _take(_loader(10, 3, seed=4), 3)
    resumed = _loader(10, 3, seed=99)
    resumed.load_state_dict({"epoch": 0, "batch_index": 1, "seed": 4})
    assert _take(resumed, 2) == straight[1:]
    assert "seed 4" in caplog.text


def test_resume_on_real_gsm8k_rows(gsm8k_parquet_dir, char_tokenizer):
    dataset = RLDataset(str(gsm8k_parquet_dir / "test.parquet"), char_tokenizer, max_samples=40, seed=0,
                        max_prompt_length=512, truncation="left")
    straight = StatefulLoader(dataset, 8, seed=5, collate_fn=dataset.collate_fn())
    indices = [list(straight.next_batch()[0]["index"]) for _ in range(7)]
    interrupted = StatefulLoader(dataset, 8, seed=5, collate_fn=dataset.collate_fn())
    for _ in range(5):  # exactly one epoch of 5 batches
        interrupted.next_batch()
    resumed = StatefulLoader(dataset, 8, seed=5, collate_fn=dataset.collate_fn())
    resumed.load_state_dict(interrupted.state_dict())
    assert [list(resumed.next_batch()[0]["index"]) for _ in range(2)] == indices[5:]
