"""The demo's "who is asking" part: a job refused for a queue its user may not use, a stop refused from
someone who does not own the job, and a job reading a secret whose value never reaches Postgres or its
log (zen.adapters.submitters, zen.jobs.authorization, zen.agent.secrets)."""

from __future__ import annotations

import sys
from pathlib import Path

from zen_dev.local.stack import DEMO_SECRET_VALUE, demo_secret

SECRET_ID, DENIED_ID = "secret-15", "denied-16"
INTRUDER = "mallory"  # sends a stop for the demo user's job
SECRET_SAID = "token read: ***"  # its output, with the value masked


def secret_request() -> dict:
    return {"job_id": SECRET_ID, "user_id": "vault", "cluster": "1xl4", "regions": ["europe-west4"],
            "secrets": {"HF_TOKEN": f"{demo_secret('zen-demo')}/versions/latest"},
            "command": [sys.executable, "-c", "import os; print('token read:', os.environ['HF_TOKEN'])"]}


def denied_request() -> dict:
    return {"job_id": DENIED_ID, "user_id": "demo", "cluster": "1xl4", "queue": "prod",
            "command": [sys.executable, "-c", "print('never runs')"]}


def check(db, home: Path) -> tuple[list[str], list[str]]:
    """(lines for the summary, problems): both refusals recorded with their senders, and the secret's
    value in no table and no job log."""
    from zen.store import repository

    lines, problems = [], []
    with db.transaction() as session:
        refused = repository.list_rejections(session)
        stored = [row["t"] or "" for row in session.sql(  # every place a job's words are kept
            "SELECT request::text AS t FROM jobs UNION ALL SELECT message FROM jobs "
            "UNION ALL SELECT reason FROM job_events UNION ALL SELECT payload FROM rejected_messages")]
    for sender, words in (("demo", "may not submit to queue prod"), (INTRUDER, "may not stop job stopped-7")):
        row = next((r for r in refused if r["principal"] == sender and words in r["reason"]), None)
        if row is None:
            problems.append(f"no refusal of {sender} ({words!r}) was recorded")
        else:
            lines.append(f"  refused, from {sender}: {row['reason']}")
    leaked = [text for text in stored if DEMO_SECRET_VALUE in text]
    logs = [p for p in (home / "joblogs").rglob("*") if p.is_file() and DEMO_SECRET_VALUE in p.read_text(errors="replace")]
    if leaked or logs:
        problems.append(f"the secret's value is stored: {len(leaked)} row(s), {len(logs)} log file(s)")
    else:
        lines.append(f"  {SECRET_ID} read its secret (HF_TOKEN, by reference); its log says {SECRET_SAID!r}, and "
                     "the value is in no table and no job log")
    return lines, problems
