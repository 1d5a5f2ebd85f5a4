"""`zen submit` stopped by Ctrl-C while its publish was on its way (a slow or retried publish the user gave up
on): the message may have gone out all the same.

- A generated job_id: it exited 130 saying nothing, the id never printed. The job may run; the user, told
  nothing, submits again and a second job (a fresh id) runs beside it. It names the job and the `--job-id` that
  tries again without a second job.
- A chosen job_id: it kept "being published" for that id in ``~/.cache/zen/submitted.json``, so submitting it
  again said "job ID is being published by another `zen submit` right now ... Not published" though none was,
  and the job, never published, was lost. The interrupted publish is forgotten, as a failed one is."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from tests.test_usercli_write_side import user_env  # noqa: F401 - the fixture
from zen.cli.main import main


@pytest.fixture
def ctrl_c_while_publishing(pubsub_server, config):
    """The first publish of a job to this test's project holds while the user presses Ctrl-C (SIGINT to the
    thread running ``zen``); ``release(lands)`` then lets it land or be refused."""
    topic = f"projects/{config.project}/topics/{config.topics.job_submitted}"
    held, decided, lands = threading.Event(), threading.Event(), []
    user = threading.get_ident()

    def refuse(where, message):
        if where != topic or held.is_set():
            return False
        held.set()
        signal.pthread_kill(user, signal.SIGINT)  # Ctrl-C, while the CLI waits for this publish's answer
        decided.wait(30)
        return not lands[0]

    def release(land: bool) -> None:
        lands.append(land)
        decided.set()

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C raises
    pubsub_server.faults.refuse = refuse
    try:
        yield release
    finally:
        decided.set()
        pubsub_server.faults.refuse = None
        signal.signal(signal.SIGINT, before)


def _published(user_env, count: int) -> list:
    deadline = time.monotonic() + 10  # the released publish lands on the stand-in's thread
    while len(found := user_env.on("zen-job-submitted")) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_a_generated_job_interrupted_while_publishing_is_named_with_how_to_retry(
        user_env, ctrl_c_while_publishing, functions, zen, capsys):
    code = main(["submit", "--cluster", "1xl4", "--", "python", "train.py"])
    ctrl_c_while_publishing(True)  # it got through all the same
    out, err = capsys.readouterr()
    [message] = _published(user_env, 1)
    job_id = json.loads(message.data)["job_id"]
    assert code == 130, (code, out, err)
    assert f"submit it again with --job-id {job_id}" in err, f"the job that may run is not named: {err!r}"
    functions.submit(json.loads(message.data))  # the function made the job

    again = main(["submit", "--job-id", job_id, "--cluster", "1xl4", "--", "python", "train.py"])
    out, err = capsys.readouterr()
    assert (again, len(user_env.on("zen-job-submitted"))) == (1, 1), (out, err)  # one job: nothing new published
    assert f"job {job_id} already exists" in err, err


def test_a_chosen_job_id_interrupted_before_it_went_out_can_be_submitted_again(user_env, ctrl_c_while_publishing,
                                                                               capsys):
    argv = ["submit", "--job-id", "train-7", "--cluster", "1xl4", "--", "python", "train.py"]
    code = main(argv)
    ctrl_c_while_publishing(False)  # refused: nothing went out
    assert code == 130, capsys.readouterr()

    again = main(argv)
    out, err = capsys.readouterr()
    assert "being published by another `zen submit`" not in err, f"no other submit publishes it: {err}"
    assert again == 0 and "submitted train-7" in out, (again, out, err)
    [message] = _published(user_env, 1)
    assert json.loads(message.data)["job_id"] == "train-7"


def test_a_chosen_job_id_interrupted_before_its_publish_went_out_can_be_submitted_again(user_env, monkeypatch,
                                                                                       capsys):
    """Ctrl-C a moment earlier, while the publisher's credentials were checked (a refresh over the network, the
    client's import and making): the id stayed "being published by another `zen submit`" for a minute, though
    nothing went out."""
    import zen.cli.publish as publishing

    checked = publishing._checked_credentials

    def ctrl_c():  # as the user pressed it while they were fetched
        monkeypatch.setattr(publishing, "_checked_credentials", checked)
        raise KeyboardInterrupt

    monkeypatch.setattr(publishing, "_checked_credentials", ctrl_c)
    argv = ["submit", "--job-id", "train-8", "--cluster", "1xl4", "--", "python", "train.py"]
    assert main(argv) == 130, capsys.readouterr()
    assert user_env.on("zen-job-submitted") == []

    again = main(argv)
    out, err = capsys.readouterr()
    assert "being published by another `zen submit`" not in err, f"no other submit publishes it: {err}"
    assert again == 0 and "submitted train-8" in out, (again, out, err)
