"""A job's final report held back by an outage of Zen's (the functions or Postgres down; Pub/Sub keeps the message
and delivers it again later) ends its attempt when Pub/Sub took the report (the CloudEvent's ``publishTime``,
Pub/Sub's clock), not when Zen read it: the job's ``finished_at``, its usage row, its GPU-seconds and its dollars
in ``zen usage`` stop there, never before the attempt's start nor after Zen read the report. The agent's clock
plays no part (the agents here run 30 minutes behind), every delivery of one message carries the time it was
first published, and a VM whose job's end was read late is not taken for one that never heard its STOP."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.messages import heartbeat, job_request
from tests.scaling.test_postgres_lost_after_a_resize import postgres_down
from tests.scaling.test_scaling_integration import CLUSTER, stack, vm_claiming  # noqa: F401 - the fixture
from zen.cli.usage import Pricer, collect
from zen.core.prices import billed_usd
from zen.store import repository, usage
from zen.store.prices import current

BEHIND = timedelta(minutes=30)  # every agent's clock here
GPUS = 4  # the cluster's (4xa100-40gb), which each job here holds whole


def report(job_id: str, status: str, seq: int, at: datetime, **extra) -> dict:
    """What the agent of vm-a publishes at ``at``, its own clock saying 30 minutes earlier."""
    return heartbeat(job_id, status, seq, vm="vm-a", sent_at=(at - BEHIND).isoformat(), **extra)


def job(zen, job_id: str):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def usage_row(zen, job_id: str) -> dict:
    with zen.db.transaction() as session:
        [row] = usage.attempts_of_job(session, job_id)
    return row


def history(zen, job_id: str) -> list[dict]:
    with zen.db.transaction() as session:
        return repository.job_history(session, job_id)


def dollars(zen, since: datetime, now: datetime) -> float:
    """``zen usage``'s total, in dollars."""
    with zen.db.transaction() as session:
        pricer = Pricer(current(session, zen.config.pricing), {c.name: c for c in zen.config.clusters})
        return collect(session, "user", since, now, pricer)["total"]["usd"]


def ran(functions, clock, job_id: str, minutes: int) -> datetime:
    """Submit ``job_id``; vm-a claims it and runs it ``minutes``, heard every minute, Zen's scale tick running every
    minute too: when Zen heard the claim."""
    functions.tick()
    functions.submit(job_request(job_id))
    functions.heartbeat(report(job_id, "CLAIMED", 1, clock()))
    claimed = clock()
    clock.advance(5)
    functions.heartbeat(report(job_id, "RUNNING", 2, clock()))
    for seq in range(3, 3 + minutes):
        clock.advance(60)
        functions.tick()
        functions.heartbeat(report(job_id, "RUNNING", seq, clock()))
    return claimed


def test_a_final_report_read_an_hour_late_is_billed_to_when_it_was_published(functions, zen, clock):
    start = clock()
    claimed = ran(functions, clock, "a", 10)
    clock.advance(30)
    published = clock()  # the job succeeds; Pub/Sub takes its report, and Zen's functions are down for an hour
    clock.advance(3600)
    functions.tick()  # Zen is back: silence counts from this tick on (the sweep takes no job for lost yet)
    functions.heartbeat(report("a", "SUCCEEDED", 20, published, exit_code=0), publish_time=published)
    read = clock()

    record, row = job(zen, "a"), usage_row(zen, "a")
    assert record.status.value == "SUCCEEDED"
    assert record.finished_at == published, f"finished_at {record.finished_at}: {record.finished_at - published} late"
    assert (row["started_at"], row["ended_at"], row["outcome"]) == (claimed, published, "SUCCEEDED")
    held_s = (published - claimed).total_seconds()  # 10 min 35 s, not 1 h 10 min 35 s
    assert row["gpu_seconds"] == GPUS * held_s, row["gpu_seconds"]
    price = float(row["usd_per_hour"])
    assert dollars(zen, start, read) == round(billed_usd(held_s, price, minimum=False), 2), (
        f"billed {dollars(zen, start, read)}, {billed_usd((read - claimed).total_seconds(), price, minimum=False)} "
        f"to when Zen read the report; {billed_usd(held_s, price, minimum=False)} to when it was published")
    [ended] = [h for h in history(zen, "a") if h["to_status"] == "SUCCEEDED"]
    assert ended["at"] == read and "ended at" in ended["reason"] and "3600 s before Zen read it" in ended["reason"]


def test_every_delivery_of_a_held_back_report_ends_the_attempt_when_it_was_first_published(
        functions, zen, clock, pg_server, db_target):
    """Pub/Sub delivers the same message (its id, its publish time) until a delivery is acked: those refused
    while Postgres is down, the one that gets through an hour later, and those after it alike."""
    claimed = ran(functions, clock, "b", 5)
    published = clock()
    event = functions.event("on_heartbeat", report("b", "STOPPED", 20, published, exit_code=143),
                            message_id="held-back", publish_time=published)
    with postgres_down(pg_server, db_target.database):
        for _ in range(3):
            clock.advance(600)
            assert functions.post("on_heartbeat", event).status_code == 500  # not acked: delivered again
    for _ in range(3):
        clock.advance(900)
        assert functions.post("on_heartbeat", event).status_code == 200
    record, row = job(zen, "b"), usage_row(zen, "b")
    assert (record.status.value, record.finished_at) == ("CANCELLED", published)
    assert (row["ended_at"], row["gpu_seconds"]) == (published, GPUS * (published - claimed).total_seconds())


def test_a_publish_time_outside_the_attempt_is_held_to_its_start_and_to_now(functions, zen, clock):
    """A publish time before the run began (clocks that disagree) ends it at its start; one after Zen read the
    report, at that reading."""
    ran(functions, clock, "c", 2)
    began = job(zen, "c").started_at
    functions.heartbeat(report("c", "FAILED", 20, clock(), exit_code=1), publish_time=began - timedelta(hours=1))
    record, row = job(zen, "c"), usage_row(zen, "c")
    assert (record.finished_at, row["ended_at"]) == (began, began)

    ran(functions, clock, "d", 2)
    clock.advance(30)
    read = clock()
    functions.heartbeat(report("d", "SUCCEEDED", 20, read, exit_code=0), publish_time=read + timedelta(hours=1))
    assert (job(zen, "d").finished_at, usage_row(zen, "d")["ended_at"]) == (read, read)


def gang_running(functions, clock):
    """Gang ``g`` of two nodes claimed (its attempt's start, returned) and RUNNING 5 s later."""
    functions.submit(job_request("g", nodes=2))
    for seq, vm in enumerate(("vm-1", "vm-2"), start=1):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{seq}"))
    claimed = clock()  # the gang complete: its attempt's start
    clock.advance(5)
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    return claimed


def test_a_gangs_last_report_read_late_ends_it_when_published(functions, zen, clock):
    """Node 0 ends first and is read at once; node 1's report, the gang's last, is read an hour after it was
    published: the attempt ends then, and each node's VM is charged until its own end at the latest."""
    claimed = gang_running(functions, clock)
    clock.advance(600)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-1", exit_code=0))
    first_ended = clock()
    clock.advance(120)
    published = clock()
    clock.advance(3600)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-2", exit_code=0), publish_time=published)
    record, row = job(zen, "g"), usage_row(zen, "g")
    assert (record.status.value, record.finished_at, row["ended_at"]) == ("SUCCEEDED", published, published)
    assert row["gpu_seconds"] == GPUS * ((first_ended - claimed) + (published - claimed)).total_seconds(), row


def test_a_gang_whose_every_report_was_held_back_is_billed_to_when_each_node_ended(functions, zen, clock):
    """Both nodes end while Zen's functions are down; an hour later the backlog is read, each node's last RUNNING
    and final report in turn: node 0 is charged until its report was published and the attempt ends when node 1's
    was, not when Zen read them (the first node's end was taken as its reading, and the hour billed twice)."""
    claimed = gang_running(functions, clock)
    clock.advance(570)
    running = clock()  # the functions go down: the nodes' reports from here on are held back
    clock.advance(30)
    first_ended = clock()
    clock.advance(120)
    published = clock()
    clock.advance(3600)
    for seq, vm, ended in ((3, "vm-1", first_ended), (3, "vm-2", published)):
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm=vm), publish_time=running)
        functions.heartbeat(heartbeat("g", "SUCCEEDED", seq + 1, vm=vm, exit_code=0), publish_time=ended)
    record, row = job(zen, "g"), usage_row(zen, "g")
    assert (record.status.value, record.finished_at, row["ended_at"]) == ("SUCCEEDED", published, published)
    assert row["gpu_seconds"] == GPUS * ((first_ended - claimed) + (published - claimed)).total_seconds(), row


def test_a_job_whose_end_was_read_late_leaves_its_vm_alone(stack, clock):
    """``zen.scaling.vms.leftovers`` deletes a VM whose agent still says it runs a job that ended over
    ``agent_silence_s`` ago (no STOP of Zen's reached it). After an outage of Zen's, the backlog read in any order,
    a final report that ended its job an hour ago read before the VM's next heartbeat (idle) is no such end: the
    VM, healthy, stays."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)

    def running(seq: int) -> None:
        fn.heartbeat(heartbeat("a", "RUNNING", seq, vm=vm.name, region="us-west1", zone=vm.zone,
                               sent_at=clock().isoformat()))

    def busy(seq: int, at: datetime) -> dict:
        return {"version": 1, "kind": "vm", "vm": vm.name, "cluster": CLUSTER, "region": "us-west1",
                "zone": vm.zone, "state": "BUSY", "seq": seq, "sent_at": at.isoformat(), "job_id": "a", "attempt": 1}

    running(2)
    fn.heartbeat(busy(2, clock()))
    for seq in range(3, 6):
        advance(50)
        fn.tick()
        running(seq)
        fn.heartbeat(busy(seq, clock()))
    advance(20)
    last_busy = busy(6, clock())  # published as Zen's functions go down: the backlog begins
    advance(10)
    published = clock()  # the job succeeds
    advance(3600)
    fn.tick()  # Zen is back; its backlog is read: the VM's last busy heartbeat, then the job's final report
    fn.heartbeat(last_busy, publish_time=published - timedelta(seconds=10))
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 8, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0,
                           sent_at=published.isoformat()), publish_time=published)
    assert job(zen, "a").finished_at == published
    fn.tick()
    with zen.db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    deleted = [d["reason"] for d in decisions if d["action"] == "DELETE" and d["vm"] == vm.name]
    assert vm.name in [i.name for i in instances("us-west1") if not i.deleting] and not deleted, deleted
