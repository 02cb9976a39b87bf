"""data.sampler: a user's sampler orders the train loader, a curriculum sampler's update(batch) shapes the next
batch, and the sampler's state resumes with the loader's (hand-derived orders; real checkpoint state files)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from hybridrl.checkpoint.state_io import load_state, save_state
from hybridrl.config import load_config
from hybridrl.data.errors import DatasetError
from hybridrl.data.factory import build_sampler
from hybridrl.data.loader import StatefulLoader
from hybridrl.data.user_code import load_user_class
from hybridrl.utils.batch import Batch

VERL_STYLE = str(Path(__file__).parent / "user_classes" / "verl_style.py")


def _sampler(name: str, size: int, *overrides: str):
    data_cfg = load_config([f"data.sampler.class_path={VERL_STYLE}", f"data.sampler.class_name={name}",
                            *overrides]).data
    return build_sampler(data_cfg, list(range(size)))


def _loader(sampler, size: int = 8, batch_size: int = 2, **kwargs) -> StatefulLoader:
    return StatefulLoader(list(range(size)), batch_size, sampler=sampler, seed=0,
                          collate_fn=lambda rows: Batch(tensors={"row": torch.tensor(rows)}), **kwargs)


def _step_batch(rows: list[int], failed: set[int]) -> Batch:
    """What a step hands the sampler: one score per row (0 for the rows in `failed`, else 1) and each row's index."""
    scores = torch.tensor([[0.0, 0.0 if row in failed else 1.0] for row in rows])
    return Batch(tensors={"token_level_scores": scores}, non_tensors={"index": rows})


def _run(loader: StatefulLoader, steps: int, failed: set[int]) -> list[list[int]]:
    taken = []
    for _ in range(steps):
        rows = loader.next_batch()[0]["row"].tolist()
        loader.update_sampler(_step_batch(rows, failed))
        taken.append(rows)
    return taken


def test_the_sampler_orders_each_epoch_and_set_epoch_reaches_it():
    sampler = _sampler("SeededShuffleSampler", 6, "data.seed=4")
    loader = _loader(sampler, size=6, batch_size=3)
    epoch0 = [loader.next_batch()[0]["row"].tolist() for _ in range(2)]
    assert sum(epoch0, []) == torch.randperm(6, generator=torch.Generator().manual_seed(4000)).tolist()
    epoch1 = [loader.next_batch()[0]["row"].tolist() for _ in range(2)]
    assert sum(epoch1, []) == torch.randperm(6, generator=torch.Generator().manual_seed(4001)).tolist()
    assert sampler.epoch == 1 and len(loader) == 2
    assert loader.state_dict() == {"epoch": 2, "batch_index": 0, "seed": 0, "sampler": None}


def test_a_curriculum_update_decides_the_next_batch():
    loader = _loader(_sampler("ReplayFailuresCurriculum", 8), size=8, batch_size=2)
    # step 1 draws rows 0, 1; row 1 fails, so step 2 replays it before row 2; it fails again and leads step 3 too
    assert _run(loader, 3, failed={1}) == [[0, 1], [1, 2], [1, 3]]
    assert loader.order.sampler.updates == 3


@pytest.mark.parametrize("stop_after", [1, 2, 4, 5])  # 4 batches per epoch: 4 is an epoch boundary
def test_a_stateful_curriculum_resumes_exactly(tmp_path, stop_after):
    failed = {1, 4}
    straight = _run(_loader(_sampler("ReplayFailuresCurriculum", 8)), 7, failed)
    first = _loader(_sampler("ReplayFailuresCurriculum", 8))
    head = _run(first, stop_after, failed)
    save_state(str(tmp_path / "data"), first.state_dict())  # the checkpoint's data.json
    resumed = _loader(_sampler("ReplayFailuresCurriculum", 8))
    resumed.load_state_dict(load_state(str(tmp_path / "data"))[0])
    assert head + _run(resumed, 7 - stop_after, failed) == straight


@pytest.mark.parametrize("stop_after", [1, 3])
def test_a_stateless_sampler_is_fast_forwarded_on_resume(stop_after):
    loader = _loader(_sampler("SeededShuffleSampler", 6), 6, 2)
    straight = [loader.next_batch()[0]["row"].tolist() for _ in range(5)]
    first = _loader(_sampler("SeededShuffleSampler", 6), 6, 2)
    head = [first.next_batch()[0]["row"].tolist() for _ in range(stop_after)]
    resumed = _loader(_sampler("SeededShuffleSampler", 6), 6, 2)
    resumed.load_state_dict(first.state_dict())
    assert head + [resumed.next_batch()[0]["row"].tolist() for _ in range(5 - stop_after)] == straight


def test_a_curriculum_without_state_warns_that_it_restarts(caplog):
    loader = _loader(_sampler("ForgetfulCurriculum", 8))
    _run(loader, 1, failed={0})
    resumed = _loader(_sampler("ForgetfulCurriculum", 8))
    with caplog.at_level(logging.WARNING, logger="hybridrl.data"):
        resumed.load_state_dict(loader.state_dict())
    assert "ForgetfulCurriculum has update() but no state_dict()" in caplog.text
    assert _run(resumed, 1, failed=set()) == [[2, 3]]  # fast-forwarded past rows 0, 1; the replay of 0 is lost


class _OutOfRange:
    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self):
        return iter(range(1, self.size + 1))

    def __len__(self) -> int:
        return self.size


class _Short(_OutOfRange):
    def __iter__(self):
        return iter(range(self.size - 3))


def test_samplers_that_break_their_contract_are_named():
    loader = _loader(_OutOfRange(4), size=4, batch_size=2)
    assert loader.next_batch()[0]["row"].tolist() == [1, 2]
    with pytest.raises(DatasetError, match=r"data.sampler _OutOfRange yielded 4, not a row index in 0..3"):
        loader.next_batch()
    short = _loader(_Short(6), size=6, batch_size=2)
    short.next_batch()
    with pytest.raises(DatasetError, match=r"_Short stopped after fewer indices than its __len__ \(6\) promised"):
        short.next_batch()
    with pytest.raises(DatasetError, match="larger than one epoch of data.sampler _Short"):
        _loader(_Short(1), size=4, batch_size=2)


def test_the_sampler_gets_verls_constructor_arguments_and_file_errors_name_the_keys(tmp_path):
    sampler = _sampler("SeededShuffleSampler", 5, "data.seed=9")
    assert sampler.size == 5 and sampler.seed == 9
    with pytest.raises(DatasetError, match="data.sampler.class_name='Nope'"):
        _sampler("Nope", 5)
    assert load_user_class(VERL_STYLE, "SeededShuffleSampler", path_key="k", name_key="n") is type(sampler)
    assert build_sampler(load_config().data, list(range(3))) is None
