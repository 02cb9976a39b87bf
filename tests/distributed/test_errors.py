"""WorkerError and WorkerDiedError lead with the worker's own exception, as one process would show it."""

from __future__ import annotations

import traceback

from hybridrl.distributed.errors import WorkerDiedError, WorkerError, final_exception
from hybridrl.models.hf import ModelLoadError


def model_load_traceback() -> str:
    """A real chained traceback, as a rank formats it: an OSError inside, our actionable error outside."""
    try:
        try:
            open("/nonexistent/config.json")
        except OSError as err:
            raise ModelLoadError("could not load the value model from critic.model.path='/nonexistent'.\n"
                                 "Point critic.model.path at a local HF model directory") from err
    except ModelLoadError:
        return traceback.format_exc()


def test_final_exception_is_the_last_exception_with_every_line_of_its_message():
    assert final_exception(model_load_traceback()) == (
        "ModelLoadError: could not load the value model from critic.model.path='/nonexistent'.\n"
        "Point critic.model.path at a local HF model directory")
    assert final_exception("AttributeError: ToyWorker has no method 'nope'\n") == \
        "AttributeError: ToyWorker has no method 'nope'"  # a reply made without a traceback


def test_worker_error_leads_with_role_rank_and_the_worker_s_exception_then_the_traceback():
    worker_traceback = model_load_traceback()
    message = str(WorkerError("actor_rollout", 0, "__init__", worker_traceback, note="ranks [1] did not answer"))
    first, second, *rest = message.splitlines()
    assert first == ("actor_rollout worker rank 0 failed in __init__(): ModelLoadError: could not load the value "
                     "model from critic.model.path='/nonexistent'.")
    assert second == "Point critic.model.path at a local HF model directory"
    assert rest[:2] == ["(ranks [1] did not answer)", "the worker's traceback:"]
    assert "\n".join(rest[2:]) == worker_traceback.rstrip()


def test_a_rank_that_died_of_an_exception_leads_with_it():
    tail = "some warning\n" + model_load_traceback()
    message = str(WorkerDiedError("critic", 1, "__init__", "exited with code 1; full log: /tmp/x/rank1.log", tail))
    assert message.startswith("critic worker rank 1 died during __init__(): exited with code 1; full log: "
                              "/tmp/x/rank1.log; the last exception in its stderr: ModelLoadError: could not load")
    assert "Common causes" not in message and message.endswith(tail.rstrip())
    killed = str(WorkerDiedError("critic", 1, "sleep", "killed by SIGKILL", "rank 1 about to sleep 60s"))
    assert "killed by SIGKILL. Common causes: out of host memory" in killed


def test_a_note_added_later_keeps_the_first_one_and_the_traceback():
    error = WorkerError("critic", 1, "__init__", model_load_traceback(), note="ranks [0] did not answer")
    noted = error.with_note("rank logs kept in /tmp/hybridrl-critic-x")
    assert (noted.role, noted.rank, noted.method) == ("critic", 1, "__init__")
    assert "\n(ranks [0] did not answer; rank logs kept in /tmp/hybridrl-critic-x)\n" in str(noted)
    assert str(noted).endswith(error.worker_traceback.rstrip())
