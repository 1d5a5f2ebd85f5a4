"""What the console's queues, clusters and job pages say about where things stand, rendered through the real app
against the embedded Postgres, with jobs made by Zen's functions.

- The queues page listed, per queue, the 20 newest PENDING jobs (then QUEUED ones, cut off once 20 were shown):
  not the head of the line, and an admitted job was dropped behind a long line. It lists the jobs in the order
  they are served (admitted first, then by priority, oldest first, as admission takes them) and says how many
  more wait.
- The clusters page gave a scaling decision's time as a bare 13:05:09: a decision of last week read as today's.
- The job page headed a running job's progress message "Final report", and said of a PENDING or QUEUED job
  that "the one running is billed as it ends" while none ran.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from tests.console.test_console_app import CLUSTER, page, setup  # noqa: F401 (fixture)
from tests.messages import heartbeat, job_request


def waiting_rows(html: str, queue: str) -> list[tuple[str, str]]:
    """(job, status) of each row of a queue's table of waiting jobs, top to bottom."""
    section = html.split(f'id="section-{queue}"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'<tr data-job="([^"]+)">.*?<td class="status">([A-Z]+)</td>', section, re.S)


def test_the_queues_page_lists_the_head_of_the_line_in_the_order_it_is_served(setup, clock, monkeypatch):
    from zen.console import pages

    _, functions, client, _ = setup
    monkeypatch.setattr(pages, "WAITING_SHOWN", 5)
    for job_id, priority in (("a1", 0), ("a2", 0), ("old", 0), ("mid-b", 0), ("mid-a", 0), ("high", 5), ("new", 0)):
        functions.submit(job_request(job_id, user_id="alice", priority=priority))  # research: 8 GPUs, 4 a job
        if job_id != "mid-b":  # mid-a and mid-b are submitted in the same instant: the job id orders them
            clock.advance(1)

    html = page(client, "/queues")
    # a1 and a2 hold research's quota (admitted, waiting for a VM); then the line admission reads: priority
    # first, then the oldest, then the job id.
    line = waiting_rows(html, "research")
    assert line == [("a1", "QUEUED"), ("a2", "QUEUED"), ("high", "PENDING"), ("old", "PENDING"), ("mid-a", "PENDING")]
    assert re.search(r'id="more-research">2 more wait behind these', html)
    assert "in the order it is served" in html
    assert "more-vision" not in html  # vision: nothing waits, nothing said of more

    monkeypatch.setattr(pages, "WAITING_SHOWN", 20)
    whole = page(client, "/queues?fragment=1")
    assert [job for job, _ in waiting_rows(whole, "research")] == ["a1", "a2", "high", "old", "mid-a", "mid-b", "new"]
    assert "more-research" not in whole


def test_the_count_of_more_waiting_jobs_is_of_those_the_viewer_may_see(setup, clock, monkeypatch):
    from zen.console import pages

    _, functions, client, _ = setup
    monkeypatch.setattr(pages, "WAITING_SHOWN", 1)
    for n in (1, 2, 3, 4):  # research's: a1 and a2 admitted, a3 and a4 wait for quota
        functions.submit(job_request(f"a{n}", user_id="alice"))
        clock.advance(1)
    admin = page(client, "/queues", who="root@example.com")  # an admin sees every job
    assert waiting_rows(admin, "research") == [("a1", "QUEUED")]
    assert re.search(r'id="more-research">3 more wait behind these', admin)
    outsider = page(client, "/queues", who="bob")  # not in research: neither its jobs nor how many
    assert waiting_rows(outsider, "research") == [] and "more-research" not in outsider
    assert "Its jobs are its members' to see." in outsider


def test_a_scaling_decision_shows_its_date_and_zone(setup):
    from zen.store import fleet

    zen, _, client, _ = setup
    with zen.db.transaction() as session:  # a decision of days before the page is read
        fleet.add_scaling_decision(session, cluster=CLUSTER, region="us-central1", action="SCALE_UP", count=1, vm=None,
                                   reason="1 job waits", now=datetime(2025, 12, 4, 13, 5, 9, tzinfo=timezone.utc))
    html = page(client, "/clusters")
    shown = re.findall(r"<tr><td>([^<]*)</td><td>us-central1</td><td>SCALE_UP</td>", html)
    assert shown == ["2025-12-04 13:05:09 UTC"]


def test_the_job_page_says_final_report_and_the_running_attempts_bill_only_when_they_apply(setup, clock):
    _, functions, client, _ = setup
    functions.submit(job_request("r1", user_id="alice", max_retries=1, retry_exit_codes=[1], retry_backoff_s=600))

    def job_page() -> str:
        return page(client, "/jobs/r1?fragment=1")

    def heading(html: str) -> str | None:
        found = re.search(r'<h2 id="job-message-heading">([^<]+)</h2>', html)
        return found.group(1) if found else None

    functions.heartbeat(heartbeat("r1", "CLAIMED", 1, attempt=1, vm="vm-a"))
    functions.heartbeat(heartbeat("r1", "RUNNING", 2, attempt=1, vm="vm-a", message="epoch 3 of 10"))
    running = job_page()
    assert 'role="status">RUNNING<' in running and "epoch 3 of 10" in running
    assert heading(running) == "Progress" and "Final report" not in running

    clock.advance(60)
    functions.heartbeat(heartbeat("r1", "FAILED", 3, attempt=1, vm="vm-a", exit_code=1, message="out of memory"))
    waiting = job_page()  # its retry waits for its backoff: attempt 1 ended and billed, nothing runs
    assert 'role="status">PENDING<' in waiting and re.search(r'id="job-usd">\$\d', waiting)
    assert "the one running is billed as it ends" not in waiting and "(its ended attempts)" in waiting
    assert heading(waiting) == "Latest report" and "Final report" not in waiting

    clock.advance(601)
    functions.tick()  # the backoff over: admitted again
    queued = job_page()
    assert 'role="status">QUEUED<' in queued
    assert "the one running is billed as it ends" not in queued and "Final report" not in queued

    functions.heartbeat(heartbeat("r1", "CLAIMED", 1, attempt=2, vm="vm-b"))
    functions.heartbeat(heartbeat("r1", "RUNNING", 2, attempt=2, vm="vm-b", message="epoch 1 of 10"))
    again = job_page()
    assert 'role="status">RUNNING<' in again and "the one running is billed as it ends" in again
    assert heading(again) == "Progress"

    clock.advance(60)
    functions.heartbeat(heartbeat("r1", "SUCCEEDED", 3, attempt=2, vm="vm-b", exit_code=0, message="loss 0.12"))
    done = job_page()
    assert 'role="status">SUCCEEDED<' in done and heading(done) == "Final report" and "loss 0.12" in done
    assert 'id="job-usd-ended"' not in done
