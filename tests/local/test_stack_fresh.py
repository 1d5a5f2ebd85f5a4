"""``zen local up --fresh`` starts from nothing: a new database, and none of the old jobs' output, so
``zen logs JOB`` cannot print an earlier run's output for a job the new database does not know, nor the
old run's notices in the webhook sink's file (a second ``make demo`` counted the first one's)."""

from __future__ import annotations

from zen_dev.embedded import stop_embedded_server
from zen_dev.local.stack import LocalStack


def test_fresh_forgets_the_old_jobs_output_and_a_plain_start_keeps_it(tmp_path):
    old = tmp_path / "joblogs" / "fixed-1" / "attempt-1.jsonl"
    old.parent.mkdir(parents=True)
    old.write_text('{"line": "an old run"}\n')
    notices = tmp_path / "notifications.jsonl"
    notices.write_text('{"job_id": "broken-6"}\n')
    try:
        LocalStack(home=tmp_path)._database()
        assert old.exists() and notices.exists()
        LocalStack(home=tmp_path, fresh=True)._database()
        assert not (tmp_path / "joblogs").exists() and not notices.exists()
    finally:
        stop_embedded_server(tmp_path)
