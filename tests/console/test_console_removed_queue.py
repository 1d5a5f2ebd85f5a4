"""The queues page lists a queue removed from the configuration whose jobs still hold GPUs or wait, as ``zen queues``
does (console.md: a page and its command never disagree): it listed the configured queues alone, so the GPUs and the
waiting jobs of a removed queue showed nowhere on the page while ``zen queues`` listed them with the note ``not in the
configuration``."""

from __future__ import annotations

import re

from tests.console.test_console_app import page
from tests.test_queues import CLUSTER, statuses
from tests.test_queues_preemption import a100s, halves_config
from tests.test_queues_waiting import make
from tests.test_queues_you_may_submit_negative_max_priority import zen_queues_json
from zen.console.app import create_app
from zen.console.viewers import local_identity

LAB = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"]},
       {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 2}, "users": ["bob"]}]


def test_the_queues_page_lists_a_removed_queue_that_zen_queues_lists(config, db, db_url, publisher, clock, tmp_path):
    zen, functions = make(config, db, publisher, clock, LAB)
    functions.submit({**a100s("a0", 4, 0), "user_id": "alice", "queue": "team-a"})
    for job_id in ("b0", "b1"):  # b1 waits: team-b's quota is 2, and team-a's 4 are taken
        clock.advance(1)
        functions.submit({**a100s(job_id, 2, 0), "user_id": "bob", "queue": "team-b"})
    assert statuses(zen, "b0") == ["QUEUED"] and statuses(zen, "b1") == ["PENDING"]
    removed = halves_config(config, [LAB[0]])
    cli = {r["queue"]: r for r in zen_queues_json(removed, db_url, tmp_path, "bob")}
    assert cli["team-b"]["note"].startswith("not in the configuration"), cli["team-b"]
    client = create_app(removed, db, local_identity("bob"), clock=clock).test_client()
    html = page(client, "/queues?fragment=1")
    assert 'id="section-team-b"' in html, html
    section = html.split('id="section-team-b"', 1)[1]
    assert cli["team-b"]["note"] in section, section
    cells = re.findall(r"<td[^>]*>(.*?)</td>", section.split("</tr>", 2)[1], re.S)  # the first row after the header
    assert [c.strip() for c in cells[1:4]] == ["0", "0", str(cli["team-b"]["admitted_gpus"])], cells
    assert cli["team-b"]["recent_gpu_hours"] is None and cells[8].strip() == "", cells  # blank, as the CLI's
    assert "no: queue team-b is not in the configuration" in section, section
    assert 'data-job="b1"' in section, section  # its waiting job, bob's own
