"""`zen stop` refuses an id whose submission Zen refused, asking about the message this machine published last, not
any message naming the id: the corrected job submitted again under that id, published and on its way, is stopped
as any job on its way (asked about any message, the stop said "no job exp-1 is known", and the job ran)."""

from __future__ import annotations

import json

from tests.test_stop_after_refused_submit import published
from tests.test_usercli_frictions import zen_cli  # noqa: F401 (fixture)
from zen.store import repository


def test_a_stop_of_the_resubmission_on_its_way_is_sent(zen_cli, publisher, functions, db):
    first = zen_cli("submit", "--job-id", "exp-1", "--cluster", "1xl4", "--", "true")
    assert first.returncode == 0, first.stderr
    [submit] = publisher.on("zen-job-submitted")
    bad = {**json.loads(submit.data), "priority": "urgent"}
    functions.submit(json.dumps(bad).encode(), attributes=dict(submit.attributes),
                     message_id=published(first))  # refused, delivered under its Pub/Sub message id
    with db.transaction() as session:
        assert repository.latest_rejection(session, "exp-1") is not None
    again = zen_cli("submit", "--job-id", "exp-1", "--cluster", "1xl4", "--", "echo", "fixed")  # corrected, published
    assert again.returncode == 0, again.stderr
    stopped = zen_cli("stop", "exp-1")  # before the function took the resubmission in
    assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
