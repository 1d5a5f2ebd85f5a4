"""An attempt whose command never ran (its input's bucket does not exist), with a real agent process, the real
scheduler (Pub/Sub stand-in, the functions, Postgres; see conftest.py) and the Cloud Storage stand-in: its history,
``zen explain``, ``zen jobs history`` and the console's job page say the agent's note that ended it. They said
"failed" ("FAILED - ended: failed"), the cause in the job's message and its output alone."""

from __future__ import annotations

import re
import sys

from google.cloud import storage as gcs

from tests.agent.test_staging import COPY_UPPER
from zen.cli.queues import explain_line, utc_time
from zen.console.app import create_app
from zen.console.viewers import local_identity

MISSING = "gs://nosuch-bucket-zz/words.txt"


def test_a_missing_input_bucket_is_the_reason_in_history_explain_and_the_console(scheduler, agents, storage, config,
                                                                                db, db_url, tmp_path, monkeypatch,
                                                                                capsys):
    from zen.cli.main import main

    gcs.Client().create_bucket("out-bkt")
    agents.start("vm-a", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work"))
    scheduler.submit("nosuch", [sys.executable, "-c", COPY_UPPER], inputs=[{"uri": MISSING}],
                     outputs="gs://out-bkt/runs")

    job = scheduler.wait_status("nosuch", "FAILED", timeout_s=30)

    assert job.exit_code is None and job.message.startswith(f"zen: input {MISSING}: 404 "), job.message
    reason = job.message.splitlines()[0].removeprefix("zen: ")
    assert "The specified bucket does not exist: nosuch-bucket-zz" in reason, reason
    assert scheduler.history("nosuch")[-1][1:] == ("FAILED", reason)
    with scheduler.db.transaction() as session:
        why = explain_line(session, scheduler.config, job, lambda moment: utc_time(moment, job.updated_at))
    assert why.startswith(f"ended: {reason}; "), why
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["explain", "nosuch"]) == 0
    assert f"nosuch: FAILED - ended: {reason}; " in capsys.readouterr().out
    assert main(["jobs", "history", "nosuch"]) == 0
    assert f"input {MISSING}: 404 " in capsys.readouterr().out
    page = create_app(config, db, local_identity("alice")).test_client().get("/jobs/nosuch?fragment=1")
    html = page.get_data(as_text=True).replace("&#39;", "'")
    assert page.status_code == 200, html
    assert re.search(r'id="job-why"><code>zen explain</code>: ended: input gs://nosuch-bucket-zz/words.txt: 404 ',
                     html), html
