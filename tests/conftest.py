"""Shared fixtures: tiny models and tokenizers built offline, the shared GSM8K data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# shared/ sits beside the clone (CI); HYBRIDRL_SHARED_DIR points elsewhere; a git worktree (e.g.
# /work/wt/<name>) finds it one level further up.
SHARED_DIR = Path(os.environ["HYBRIDRL_SHARED_DIR"]) if os.environ.get("HYBRIDRL_SHARED_DIR") else next(
    (parent / "shared" for parent in Path(__file__).resolve().parents[1:4] if (parent / "shared" / "data").is_dir()),
    Path(__file__).resolve().parents[1].parent / "shared")
GSM8K_DIR = SHARED_DIR / "data" / "gsm8k"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_configure(config):
    """A temp directory of the session's own (TMPDIR for its subprocesses too). Rank-log folders that killed
    controllers leave are swept by the fixtures below when a test ends; a second test session running at the same
    time (a developer's, a helper's) would sweep this one's folders while a test still reads them. The inductor
    cache stays where it was, so compiled kernels are reused across sessions."""
    import getpass
    import multiprocessing.util
    import tempfile

    if os.environ.get("HYBRIDRL_TEST_SESSION_TMP"):
        return  # a pytest subprocess of a session keeps the session's directory
    shared = tempfile.gettempdir()
    multiprocessing.util.get_temp_dir()  # multiprocessing's own folder stays in `shared`: it removes it at exit
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(shared, f"torchinductor_{getpass.getuser()}"))
    session = tempfile.mkdtemp(prefix="hrl-tests-", dir=shared)
    os.environ["TMPDIR"] = os.environ["HYBRIDRL_TEST_SESSION_TMP"] = session
    tempfile.tempdir = session
    config.add_cleanup(lambda: shutil.rmtree(session, ignore_errors=True))


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: `items` is what runs
def pytest_collection_modifyitems(config, items):
    import torch

    from tests.triton_interpreter import KERNEL_TEST_FILES, start_interpreted_files

    if any(item.nodeid.endswith("test_triton_on_cpu.py::test_triton_kernels_under_the_interpreter") for item in items):
        start_interpreted_files(KERNEL_TEST_FILES)  # runs beside the tests collected before it
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K_DIR / "train.jsonl").exists():
        pytest.fail(f"GSM8K data not found at {GSM8K_DIR}; the repo expects ../shared/data/gsm8k beside it")
    return GSM8K_DIR


@pytest.fixture(scope="session")
def char_tokenizer():
    from hybridrl.models.tiny import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A local HF model directory (tiny Qwen2 + char tokenizer), what `model.path` points at."""
    from hybridrl.models.tiny import save_tiny_model_dir

    return save_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_qwen2")), arch="qwen2", seed=0)


@pytest.fixture(scope="session")
def arithmetic_files(tmp_path_factory):
    from hybridrl.data.arithmetic import make_arithmetic_rows
    from hybridrl.data.parquet import write_parquet

    root = tmp_path_factory.mktemp("arith")
    test_rows = make_arithmetic_rows(16, seed=1, split="test")
    train_rows = make_arithmetic_rows(64, seed=0, split="train", exclude={r["prompt"][0]["content"] for r in test_rows})
    train, test = str(root / "train.parquet"), str(root / "test.parquet")
    write_parquet(train_rows, train)
    write_parquet(test_rows, test)
    return train, test


@pytest.fixture(scope="session")
def arith_model_dir(tmp_path_factory) -> str:
    from hybridrl.models.tiny import save_tiny_model_dir

    return save_tiny_model_dir(str(tmp_path_factory.mktemp("arith_model")), arch="qwen2", seed=0,
                               chars="0123456789+=", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                               intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(autouse=True)
def _hybridrl_logs_reach_caplog(caplog):
    """The `hybridrl` logger does not propagate to the root (no double printing), so hand caplog's
    handler to it directly; otherwise whether caplog sees a record depends on test order."""
    import logging

    logger = logging.getLogger("hybridrl")
    logger.addHandler(caplog.handler)
    yield
    logger.removeHandler(caplog.handler)


@pytest.fixture(autouse=True)
def _rank_logs_removed():
    """A rank that dies keeps its log folder in the temp directory, by design, for the user to read; so does a
    controller killed outright. Tests that do either read it through the error, and the folders that appeared
    during the test and belong to this process or to a controller that is gone (a subprocess the test ran)
    go afterwards, so the suite leaves nothing behind (tests/faults checks it)."""
    from hybridrl.checkpoint.startup import rank_log_folders, stale_rank_logs

    before = set(rank_log_folders())
    yield
    import shutil

    for folder in (set(rank_log_folders(owner=os.getpid())) | set(stale_rank_logs())) - before:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _session_rank_logs_removed():
    """The same at the end of the session for groups that outlive a test (module fixtures whose group a test
    aborted: an aborted group keeps its logs)."""
    from hybridrl.checkpoint.startup import rank_log_folders

    before = set(rank_log_folders())
    yield
    import shutil

    for folder in set(rank_log_folders(owner=os.getpid())) - before:
        shutil.rmtree(folder, ignore_errors=True)
