"""The queues page's borrowing limit: a queue of a cohort that sets no `borrowing_limit` may borrow without limit
(docs/how-to/queues.md: "unset: no limit"), and its cell said "none", which reads as the opposite; a queue outside
any cohort borrows nothing (0)."""

from __future__ import annotations

import re

from tests.console.test_console_app import CLUSTER, page
from zen.console.app import create_app
from zen.console.viewers import local_identity
from zen.core.config import ZenConfig

QUEUES = [
    {"name": "research", "cohort": "lab", "quota": {CLUSTER: 4}, "borrowing_limit": {CLUSTER: 2}},
    {"name": "vision", "cohort": "lab", "quota": {CLUSTER: 4}},
    {"name": "solo", "quota": {CLUSTER: 4}},
]


def borrowing_limit(html: str, queue: str) -> str:
    section = html.split(f'id="section-{queue}"', 1)[1].split("</table>", 1)[0]
    row = re.search(rf'<th scope="row">{CLUSTER}</th>(.*?)</tr>', section, re.S)
    assert row is not None, section
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)[2].strip()


def test_a_queue_without_a_borrowing_limit_shows_no_limit(config, db, clock):
    queued = ZenConfig.model_validate({**config.model_dump(), "queues": QUEUES})
    client = create_app(queued, db, local_identity("alice"), clock=clock).test_client()
    html = page(client, "/queues?fragment=1")
    assert borrowing_limit(html, "vision") == "no limit"
    assert borrowing_limit(html, "research") == "2"
    assert borrowing_limit(html, "solo") == "0"
