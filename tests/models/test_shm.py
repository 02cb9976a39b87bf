"""use_shm: models and data files load from a copy in a tmpfs (a temporary root stands in for /dev/shm): the copy
is made once and reused, replaced when the source changes, made by one of several processes at once, and a copy
that does not fit is refused with the sizes and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.data.factory import build_rl_dataset
from hybridrl.models.errors import ModelLoadError
from hybridrl.models.hf import load_causal_lm
from hybridrl.models.shm import CACHE_DIR, MANIFEST, ROOT_ENV, copy_to_shm, require_space

KEYS = {"use_shm_key": "actor_rollout_ref.model.use_shm", "source_key": "actor_rollout_ref.model.path"}


@pytest.fixture
def shm_root(tmp_path, monkeypatch) -> str:
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setenv(ROOT_ENV, str(root))
    return str(root)


def test_the_model_loads_from_its_copy_with_equal_weights(tiny_model_dir, shm_root, caplog):
    model = load_causal_lm(tiny_model_dir, use_shm=True)
    assert model.name_or_path.startswith(os.path.join(shm_root, CACHE_DIR))
    original = load_causal_lm(tiny_model_dir)
    for (name, copied), (_, source) in zip(model.state_dict().items(), original.state_dict().items()):
        assert torch.equal(copied, source), name
    assert "actor_rollout_ref.model.use_shm: loading from" in caplog.text and "copied" in caplog.text


def test_a_copy_is_reused_until_the_source_changes(tiny_model_dir, shm_root, tmp_path):
    import shutil

    source = str(tmp_path / "model")
    shutil.copytree(tiny_model_dir, source)
    first = copy_to_shm(source, **KEYS)
    files = sorted(os.listdir(first.path))
    assert first.copied_bytes == first.total_bytes > 0 and files == sorted(os.listdir(source))
    assert copy_to_shm(source, **KEYS) == first.__class__(first.path, 0, first.total_bytes)
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config["comment"] = "edited"
    with open(os.path.join(source, "config.json"), "w") as f:
        json.dump(config, f)
    again = copy_to_shm(source, **KEYS)
    assert again.copied_bytes == again.total_bytes and again.path == first.path
    with open(os.path.join(again.path, "config.json")) as f:
        assert json.load(f)["comment"] == "edited"


def test_a_half_copy_of_a_dead_process_is_removed(tiny_model_dir, shm_root):
    first = copy_to_shm(tiny_model_dir, **KEYS)
    entry = os.path.dirname(first.path)
    stale = f"{entry}.partial-999999"
    os.makedirs(stale)
    os.remove(os.path.join(entry, MANIFEST))  # as if the copy never finished
    copy_to_shm(tiny_model_dir, **KEYS)
    assert not os.path.exists(stale) and os.path.exists(os.path.join(entry, MANIFEST))


def test_processes_copying_at_once_share_one_complete_copy(tiny_model_dir, shm_root):
    code = ("import sys; from hybridrl.models.shm import copy_to_shm; c = copy_to_shm(sys.argv[1], "
            "use_shm_key='k.use_shm', source_key='k.path'); print(c.path, c.copied_bytes > 0)")
    env = {**os.environ, ROOT_ENV: shm_root}
    processes = [subprocess.Popen([sys.executable, "-c", code, tiny_model_dir], stdout=subprocess.PIPE, text=True,
                                  env=env) for _ in range(2)]
    outputs = sorted(p.communicate(timeout=120)[0].split() for p in processes)
    assert all(p.returncode == 0 for p in processes)
    assert outputs[0][0] == outputs[1][0] and [o[1] for o in outputs] == ["False", "True"]  # one copied
    cache = os.path.join(shm_root, CACHE_DIR)
    assert not [name for name in os.listdir(cache) if ".partial-" in name]


def test_a_copy_that_does_not_fit_names_the_sizes_and_the_fixes():
    require_space(10, 10, src="/m", cache="/dev/shm/hybridrl-cache", use_shm_key="critic.model.use_shm")
    with pytest.raises(ModelLoadError) as error:
        require_space(3 << 30, 1 << 30, src="/models/qwen", cache="/dev/shm/hybridrl-cache",
                      use_shm_key="critic.model.use_shm")
    for needle in ("critic.model.use_shm=true copies /models/qwen (3.00 GiB)", "/dev/shm has 1.00 GiB free",
                   "rm -rf /dev/shm/hybridrl-cache", "--shm-size", ROOT_ENV, "critic.model.use_shm=false"):
        assert needle in str(error.value)


def test_a_missing_source_names_its_key(shm_root, tmp_path):
    with pytest.raises(ModelLoadError, match=r"actor_rollout_ref.model.path='.*nowhere': no such file"):
        copy_to_shm(str(tmp_path / "nowhere"), **KEYS)


def test_data_use_shm_reads_the_data_files_from_their_copy(shm_root, arithmetic_files, char_tokenizer):
    train, _ = arithmetic_files
    data_cfg = load_config(["data.use_shm=true"]).data
    dataset = build_rl_dataset(data_cfg, [train], char_tokenizer, "train", seed=1)
    assert dataset.files[0].startswith(os.path.join(shm_root, CACHE_DIR)) and len(dataset) == 64
