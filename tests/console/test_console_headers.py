"""What a browser is told about the console's pages, which show one user's text (a job's command, labels, report)
to others: every answer forbids framing (no page of another site lays the console under its own buttons), bars
content sniffing, and runs only the scripts and styles the console wrote itself (a nonce fresh per answer), so
markup that ever slipped into a page unescaped would not run; and that text is escaped where it is shown."""

from __future__ import annotations

import re

from tests.console.test_console_app import page, setup  # noqa: F401 - fixture
from tests.messages import agent_run, job_request

HOSTILE = '<img src=x onerror="alert(1)"></script><script>alert(2)</script>'


def policy_of(answer) -> dict[str, str]:
    text = answer.headers.get("Content-Security-Policy") or ""
    return {d.split()[0]: " ".join(d.split()[1:]) for d in (p.strip() for p in text.split(";")) if d}


def test_every_answer_forbids_framing_sniffing_and_scripts_the_console_did_not_write(setup, clock):
    _, functions, client, _ = setup
    functions.submit(job_request("a1", user_id="alice"))
    answers = {url: client.get(url) for url in ("/jobs", "/jobs/a1", "/jobs/a1?fragment=1", "/queues", "/clusters",
                                                "/usage", "/jobs/nope", "/jobs?status=NOPE")}
    for beat in agent_run("a1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(30)
    answers["/jobs/a1/output"] = client.get("/jobs/a1/output")
    nonces = set()
    for url, answer in answers.items():
        assert answer.headers.get("X-Content-Type-Options") == "nosniff", url
        assert answer.headers.get("X-Frame-Options") == "DENY", url
        policy = policy_of(answer)
        assert policy.get("frame-ancestors") == "'none'" and policy.get("default-src") == "'none'", (url, policy)
        assert policy.get("connect-src") == "'self'" and policy.get("base-uri") == "'none'", (url, policy)
        script = re.fullmatch(r"'nonce-([A-Za-z0-9_-]{16,})'", policy.get("script-src", ""))
        assert script and policy.get("style-src") == policy["script-src"], (url, policy)
        nonces.add(script.group(1))
        html = answer.get_data(as_text=True)
        for tag in re.findall(r"<(?:script|style)\b[^>]*>", html):  # each of the console's own carries the nonce
            assert tag.endswith(f' nonce="{script.group(1)}">'), (url, tag)
    assert len(nonces) == len(answers)  # fresh per answer: a page's nonce is no use in the next one
    assert re.search(r'<script nonce="[^"]+">', answers["/jobs/a1"].get_data(as_text=True))


def test_a_jobs_text_reaches_other_viewers_escaped(setup, clock):
    _, functions, client, _ = setup
    functions.submit(job_request("a1", user_id="alice", queue="research", command=["sh", "-c", HOSTILE],
                                 labels={"team": '"><img src=x onerror=alert(3)>'}))
    for beat in agent_run("a1", vm="vm-a"):
        functions.heartbeat({**beat, "message": HOSTILE} if beat["status"] == "SUCCEEDED" else beat)
        clock.advance(30)
    html = (page(client, "/jobs/a1", "root@example.com") + page(client, "/jobs/a1?fragment=1", "alice")
            + page(client, "/jobs?label=team%3Dx", "alice"))
    assert "<img" not in html and "alert(2)</script>" not in html
    assert "&lt;img src=x onerror=" in html and "&lt;script&gt;alert(2)" in html and "&#34;&gt;&lt;img" in html


def test_the_console_function_answers_with_the_apps_headers(config, db_url, monkeypatch):
    """functions/main.py ``console`` hands back the app's headers as they are (deployed, behind IAP)."""
    import functions_framework

    from tests.conftest import ROOT

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_CONSOLE_IAP_AUDIENCE", "/projects/1/global/backendServices/2")
    answer = functions_framework.create_app("console", str(ROOT / "functions" / "main.py")).test_client().get("/jobs")
    assert answer.status_code == 401 and answer.headers.get("X-Frame-Options") == "DENY"
    assert policy_of(answer).get("frame-ancestors") == "'none'"
