"""`zen submit --array` whose publish timed out says the array "may have been published all the same: to try
again without making a second array, submit it again with --job-id X". Doing exactly that, when the first
publish did land, was refused with "job_id X is taken ...: use a new job_id (or none: zen makes one)": the advice
that makes the second array (every task run twice). It says the array exists and the same request runs nothing
new, as a single job's retry does; another array of that id is still told to use a new job_id."""

from __future__ import annotations

import json

from tests.test_usercli_write_side import user_env  # noqa: F401 - the fixture
from zen.cli.main import main


def test_retrying_an_array_whose_publish_landed_is_not_told_to_use_a_new_job_id(user_env, functions, zen, capsys,
                                                                                monkeypatch):
    from zen.cli import user as usercli
    from zen.cli.kit import CliError

    real = usercli.publish

    def lands_then_times_out(topic_field, payload, attributes=None):
        real(topic_field, payload, attributes)  # it got through; its answer did not
        raise CliError("could not publish to projects/p/topics/zen-job-submitted: TimeoutError")

    argv = ["submit", "--job-id", "sweep", "--array", "3", "--cluster", "1xl4", "--", "python", "trial.py"]
    monkeypatch.setattr(usercli, "publish", lands_then_times_out)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "submit it again with --job-id sweep" in err, err
    [message] = user_env.on("zen-job-submitted")
    functions.submit(json.loads(message.data))  # the function made the array
    monkeypatch.setattr(usercli, "publish", real)

    code = main(argv)  # what the message said to do
    out, err = capsys.readouterr()
    assert len(user_env.on("zen-job-submitted")) == 1  # rightly not published again
    assert "use a new job_id" not in err, (
        f"the retry the CLI asked for is told to use a new job_id (a second array, every task twice): {err}")
    assert "already" in err, err


def test_another_array_of_a_taken_id_is_still_told_to_use_a_new_one(user_env, functions, zen, capsys):
    first = ["submit", "--job-id", "sweep", "--array", "3", "--cluster", "1xl4", "--", "python", "trial.py"]
    assert main(first) == 0
    [message] = user_env.on("zen-job-submitted")
    functions.submit(json.loads(message.data))
    capsys.readouterr()
    assert main(first[:4] + ["4"] + first[5:]) == 1  # four tasks, not three: another array
    err = capsys.readouterr().err
    assert "use a new job_id" in err and "already exists" not in err, err
