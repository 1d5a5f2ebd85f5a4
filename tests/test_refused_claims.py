"""No claim storms (issue 34), Zen's side: a claim refused because its VM is being scaled down says so
to the VM (the RELEASE's attribute ``refused``), publishes the start again once per cause and VM (a
repeat waits for the next tick, which publishes it), and is recorded once with a count; the job is
never lost and starts on another VM. ``rejected_messages`` is pruned on its retention, by the tick, a
batch at a time, and read a page at a time (``zen rejected``)."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.messages import heartbeat, job_request
from zen.store import fleet, rejections, repository

CLUSTER = "4xa100-40gb"


def job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def starts(publisher, job_id: str) -> int:
    return sum(1 for m in publisher.on("zen-job-start") if m.attributes.get("job_id") == job_id)


def releases(publisher, vm: str) -> list[dict[str, str]]:
    return [m.attributes for m in publisher.on("zen-vm-control")
            if m.attributes.get("vm") == vm and m.attributes.get("action") == "RELEASE"]


def drain(zen, vm: str, clock) -> None:
    with zen.db.transaction() as session:
        assert fleet.drain_unless_busy(session, vm, CLUSTER, "us-central1", clock())


def rows(zen) -> list[dict]:
    with zen.db.transaction() as session:
        return repository.list_rejections(session)


def test_a_drained_vms_claims_publish_the_start_once_per_tick_and_count_on_one_row(functions, zen, publisher, clock):
    functions.submit(job_request("j1"))
    assert starts(publisher, "j1") == 1
    drain(zen, "vm-d", clock)

    functions.heartbeat(heartbeat("j1", "CLAIMED", 1, vm="vm-d"))
    assert starts(publisher, "j1") == 2  # its copy is acked by the VM: the start goes out again
    [first] = releases(publisher, "vm-d")
    assert first["refused"] == "draining" and first["answers"] == "1"
    for seq in range(2, 7):  # an agent that goes on claiming (an older one): each copy it pulls again
        clock.advance(0.5)
        functions.heartbeat(heartbeat("j1", "CLAIMED", seq, vm="vm-d"))
    assert starts(publisher, "j1") == 2  # not once per refusal
    assert len(releases(publisher, "vm-d")) == 6  # each claim is answered all the same
    [row] = rows(zen)
    assert (row["count"], row["job_id"], row["reason"]) == (6, "j1", "VM vm-d is being scaled down")
    assert row["last_at"] > row["at"]
    queued = job(zen, "j1")
    assert queued.status.value == "QUEUED" and queued.widen_at is not None

    clock.advance(1)
    functions.tick()  # the held-back start goes out again, with a note in the job's history
    assert starts(publisher, "j1") == 3 and job(zen, "j1").widen_at is None
    with zen.db.transaction() as session:
        notes = [r["reason"] for r in repository.job_history(session, "j1")]
    assert "start published again: held back after its claim was refused again" in notes
    clock.advance(0.5)
    functions.heartbeat(heartbeat("j1", "CLAIMED", 7, vm="vm-d"))  # the new copy, refused once more
    assert starts(publisher, "j1") == 4
    clock.advance(0.5)
    functions.heartbeat(heartbeat("j1", "CLAIMED", 8, vm="vm-d"))
    assert starts(publisher, "j1") == 4
    assert [r["count"] for r in rows(zen)] == [8]

    functions.heartbeat(heartbeat("j1", "CLAIMED", 1, vm="vm-b"))  # another VM takes it
    assert job(zen, "j1").status.value == "ASSIGNED" and job(zen, "j1").vm == "vm-b"


def test_each_drained_vm_gets_the_start_again_once_and_other_refusals_count_apart(functions, zen, publisher, clock):
    functions.submit(job_request("j2"))
    drain(zen, "vm-d", clock)
    drain(zen, "vm-e", clock)
    functions.heartbeat(heartbeat("j2", "CLAIMED", 1, vm="vm-d"))
    clock.advance(0.5)
    functions.heartbeat(heartbeat("j2", "CLAIMED", 1, vm="vm-e"))  # a cause of its own: published again
    assert starts(publisher, "j2") == 3
    functions.heartbeat(heartbeat("j2", "CLAIMED", 1, vm="vm-b"))
    functions.heartbeat(heartbeat("j2", "SUCCEEDED", 2, vm="vm-b", exit_code=0))
    for seq in (1, 2, 3):  # copies of its start, claimed after the job ended: an ordinary race, released
        clock.advance(0.5)
        functions.heartbeat(heartbeat("j2", "CLAIMED", seq, vm="vm-c"))
    late = [m.attributes for m in publisher.on("zen-vm-control") if m.attributes.get("vm") == "vm-c"]
    assert len(late) == 3 and all("refused" not in a for a in late)  # no cause: no back-off on the VM
    assert sorted((r["reason"], r["count"]) for r in rows(zen)) == [  # `zen rejected` filled with them: 7 rows
        ("VM vm-d is being scaled down", 1), ("VM vm-e is being scaled down", 1)]  # in a newcomer's first run
    events = [json.loads(m.data) for m in publisher.on("zen-job-events")]
    assert sum(e["type"] == "job.message_ignored" for e in events) == 2  # the refusals, no late claim


def test_refusals_are_pruned_after_their_retention_a_batch_at_a_time(zen, clock):
    now = clock()
    with zen.db.transaction() as session:
        for i in range(7):
            rejections.record(session, source="s", message_id=f"old-{i}", job_id=None, reason="r",
                              payload=b"x", now=now - timedelta(days=8))
        rejections.record(session, source="s", message_id="kept", job_id="j", reason="r", payload=b"x",
                          now=now - timedelta(days=8), key="vm/j/1/draining")
        rejections.record(session, source="s", message_id="kept-2", job_id="j", reason="r", payload=b"x",
                          now=now - timedelta(days=1), key="vm/j/1/draining")  # a repeat: still seen lately
        rejections.record(session, source="s", message_id="new", job_id=None, reason="r", payload=b"x", now=now)
    assert rejections.prune(zen.db, now, batch=3) == 7  # three transactions: 3, 3, 1
    assert sorted((r["message_id"], r["count"]) for r in rows(zen)) == [("kept", 2), ("new", 1)]
    assert rejections.prune(zen.db, now + timedelta(days=6, hours=1)) == 1  # the repeat's row, 7 days on
    assert zen.on_scale_tick().pruned == 0


def test_zen_rejected_reads_a_page_at_a_time_newest_first(zen, clock, db_url, monkeypatch, capsys):
    from zen.cli.main import main

    with zen.db.transaction() as session:
        for i in range(5):
            rejections.record(session, source="s", message_id=f"m{i}", job_id=f"j{i}", reason=f"r{i}",
                              payload=b"payload", now=clock())
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["rejected", "--limit", "2", "--json"]) == 0
    out = capsys.readouterr()
    page = json.loads(out.out)
    assert [r["message_id"] for r in page] == ["m4", "m3"] and page[0]["payload"] == "payload"
    assert page[0]["count"] == 1
    assert main(["rejected", "--limit", "2", "--before", str(page[-1]["id"])]) == 0
    table = capsys.readouterr()
    lines = table.out.splitlines()
    assert lines[0].split()[:4] == ["AT", "ID", "COUNT", "LAST_AT"] and "payload" not in table.out
    assert [line.split()[-1] for line in lines[1:]] == ["r2", "r1"]
    assert table.err.strip() == f"older: zen rejected --before {page[-1]['id'] - 2}"
    assert main(["rejected", "--limit", "1", "--before", str(page[-1]["id"] - 2)]) == 0
    assert "older" not in capsys.readouterr().err  # the last page: it offered a page that was empty


def test_a_vm_being_scaled_down_that_goes_away_as_it_claims_gives_the_claim_up(functions, zen, clock):
    """A drained VM's agent gives the start back as its VM goes and says PREEMPTED, read before its CLAIMED.
    The PREEMPTED was refused as a claim (the VM is draining) and so not recorded as giving the attempt up;
    once the deleted VM was forgotten (its drain with it), its late CLAIMED won the claim for a VM gone, and
    the sweep spent an attempt (with max_attempts 1: FAILED, the job never ran)."""
    functions.submit(job_request("j1", max_attempts=1))
    with zen.db.transaction() as session:
        fleet.see_instances(session, "4xa100-40gb", "us-central1", ["vm-d"], clock())
        assert fleet.drain_unless_busy(session, "vm-d", "4xa100-40gb", "us-central1", clock())
    functions.heartbeat(heartbeat("j1", "PREEMPTED", 2, vm="vm-d"))
    clock.advance(60)
    with zen.db.transaction() as session:  # a pass lists the MIG without vm-d
        fleet.see_instances(session, "4xa100-40gb", "us-central1", [], clock())
    functions.heartbeat(heartbeat("j1", "CLAIMED", 1, vm="vm-d"))  # the late copy
    with zen.db.transaction() as session:
        record = repository.get_job(session, "j1")
    assert (record.status.value, record.vm, record.left_vms) == ("QUEUED", None, {"vm-d": 2})
