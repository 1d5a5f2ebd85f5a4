"""An array named in `zen submit` and `zen stop` is called an array (through ``zen.cli.main``, the Pub/Sub stand-in,
the real Postgres and the functions):

- `zen submit --job-id sweep --array 3 ...`, `sweep` being an array of another request already, said "job_id sweep
  is taken (a job, or an array's tasks sweep-N)": which of them, and where to look, left to guess. It names the
  array, its tasks and `zen jobs list --array sweep`.
- `zen stop sweep` of an array whose tasks all ended said "job sweep has already ended (an array of 4 tasks, all
  ended)": no job is called sweep. It says the array has ended, and sends nothing as before.
"""

from __future__ import annotations

from tests.messages import job_request
from tests.test_usercli_write_side import user_env  # noqa: F401 - fixture
from zen.cli.main import main


def test_an_array_id_taken_by_another_array_names_that_array(user_env, functions, capsys):
    functions.submit(job_request("sweep", user_id="alice", cluster="1xl4", array={"count": 4}))
    capsys.readouterr()
    code = main(["submit", "--job-id", "sweep", "--array", "3", "--cluster", "1xl4", "--", "python", "train.py"])
    err = capsys.readouterr().err
    assert (code, user_env.on("zen-job-submitted")) == (1, []), err
    assert "taken by array sweep" in err and "4 tasks" in err and "zen jobs list --array sweep" in err, err
    assert "a job, or an array's tasks" not in err, err


def test_a_job_id_taken_by_a_job_is_still_told_as_taken(user_env, functions, capsys):
    functions.submit(job_request("sweep", user_id="alice", cluster="1xl4"))
    capsys.readouterr()
    assert main(["submit", "--job-id", "sweep", "--array", "3", "--cluster", "1xl4", "--", "python", "train.py"]) == 1
    err = capsys.readouterr().err
    assert "job_id sweep is taken" in err and "array sweep" not in err and user_env.on("zen-job-submitted") == [], err


def test_a_stop_of_an_ended_array_says_the_array_has_ended(user_env, functions, capsys):
    functions.submit(job_request("sweep", user_id="alice", cluster="1xl4", array={"count": 2}))
    functions.stop({"job_id": "sweep"})  # both tasks CANCELLED while waiting
    capsys.readouterr()
    assert main(["stop", "sweep"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("array sweep has already ended (its 2 tasks all ended)") and "not sent" in out, out
    assert user_env.on("zen-job-stop") == [], out
