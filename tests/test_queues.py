"""Kueue-style queues (zen.jobs.queueing) through the functions, against a real Postgres: quota admission,
PENDING jobs that scale nothing, release on end, priority, fair sharing in a cohort, borrowing, the
reasons users see, and quota never exceeded under concurrent deliveries."""

from __future__ import annotations

import itertools
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest

from tests.messages import agent_run, job_request
from zen.core.config import ZenConfig
from zen.core.errors import ConfigError
from zen.core.events import PUBSUB_EVENT_TYPE
from zen.jobs.queueing import Queueing
from zen.store import queues as queue_rows, repository
from zen.store.jobstore import PostgresJobTx

CLUSTER = "4xa100-40gb"  # 4 GPUs per VM, so a job holds 4 GPUs of its queue's quota


def with_queues(config, queues, **extra) -> ZenConfig:
    return ZenConfig.model_validate({**config.model_dump(), "queues": queues, **extra})


@pytest.fixture
def queued_zen(config, db, publisher, clock, db_url, monkeypatch, request):
    """A Zen whose configuration has the queues of the test's ``queues`` marker, and its functions."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(with_queues(config, request.node.get_closest_marker("queues").args[0]), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def status(zen, job_id) -> str:
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id).status.value


def statuses(zen, *job_ids) -> list[str]:
    return [status(zen, j) for j in job_ids]


def started(publisher) -> list[str]:
    return [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-start")]


def run_to_end(functions, job_id, vm):
    for beat in agent_run(job_id, vm=vm):
        functions.heartbeat(beat)


ONE_QUEUE = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]}]


@pytest.mark.queues(ONE_QUEUE)
def test_a_job_beyond_quota_stays_pending_and_is_admitted_when_quota_frees(queued_zen, publisher):
    zen, functions = queued_zen
    for n in (1, 2, 3):
        functions.submit(job_request(f"j{n}"))
    assert statuses(zen, "j1", "j2", "j3") == ["QUEUED", "QUEUED", "PENDING"]
    assert started(publisher) == ["j1", "j2"]  # the PENDING job is not demand: no start message
    with zen.db.transaction() as session:
        assert not [r for r in repository_demand(session) if r["jobs"] == 3]
        why = Queueing(zen.config).why_pending(PostgresJobTx(session), repository.get_job(session, "j3"))
    assert why == f"queue research holds 8 GPUs of {CLUSTER} (quota 8), the job needs 4"

    run_to_end(functions, "j1", "vm-a")  # its end frees 4 GPUs: j3 is admitted in the same delivery
    assert statuses(zen, "j1", "j3") == ["SUCCEEDED", "QUEUED"]
    assert started(publisher) == ["j1", "j2", "j3"]
    admitted = [json.loads(m.data) for m in publisher.on("zen-job-events") if m.attributes["type"] == "job.admitted"]
    assert [(e["job_id"], e["queue"]) for e in admitted] == [("j1", "research"), ("j2", "research"), ("j3", "research")]
    assert admitted[-1]["reason"] == f"admitted by queue research: 8/8 GPUs of {CLUSTER}"
    with zen.db.transaction() as session:  # zen jobs list --queue
        assert [j.job_id for j in repository.recent_jobs(session, queue="research")] == ["j3", "j2", "j1"]
        assert repository.recent_jobs(session, queue="nosuch") == []


def repository_demand(session):
    from zen.store import fleet

    return fleet.queued_demand(session, CLUSTER, datetime.now(timezone.utc), 600)  # (all jobs alike: late or not)


@pytest.mark.queues(ONE_QUEUE)
def test_stopping_an_admitted_job_admits_the_next_and_a_stopped_pending_job_never_starts(queued_zen, publisher):
    zen, functions = queued_zen
    for n in (1, 2, 3, 4):
        functions.submit(job_request(f"j{n}"))
    functions.stop({"job_id": "j3"})  # PENDING -> CANCELLED: frees nothing
    assert statuses(zen, "j3", "j4") == ["CANCELLED", "PENDING"]
    functions.stop({"job_id": "j1"})  # QUEUED -> CANCELLED: its quota goes to j4, not to j3
    assert statuses(zen, "j1", "j4") == ["CANCELLED", "QUEUED"]
    assert started(publisher) == ["j1", "j2", "j4"]


@pytest.mark.queues(ONE_QUEUE)
def test_higher_priority_is_admitted_first_then_the_oldest(queued_zen, clock):
    zen, functions = queued_zen
    for payload in (job_request("run1"), job_request("run2"), job_request("old-low"),
                    job_request("new-high", priority=5), job_request("newer-low")):
        functions.submit(payload)
        clock.advance(1)
    functions.stop({"job_id": "run1"})
    assert statuses(zen, "new-high", "old-low", "newer-low") == ["QUEUED", "PENDING", "PENDING"]
    functions.stop({"job_id": "run2"})
    assert statuses(zen, "old-low", "newer-low") == ["QUEUED", "PENDING"]
    with zen.db.transaction() as session:
        why = Queueing(zen.config).why_pending(PostgresJobTx(session), repository.get_job(session, "newer-low"))
    assert why == f"queue research holds 8 GPUs of {CLUSTER} (quota 8), the job needs 4"  # nobody ahead now


@pytest.mark.queues(ONE_QUEUE + [{"name": "default", "quota": {"1xl4": 1}}])
def test_requests_that_no_queue_can_take_are_rejected_with_the_reason(queued_zen):
    zen, functions = queued_zen
    cases = {
        "unknown": (job_request("a", queue="nope"), "unknown queue 'nope'; queues: research, default"),
        "no quota": (job_request("b", user_id="bob"), f"queue default has no quota for cluster {CLUSTER}"),
        "too big": (job_request("c", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=8),
                    "queue research has no quota for cluster 8xa100-40gb"),
    }
    for payload, _ in cases.values():
        functions.submit(payload)
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in repository.list_rejections(session)]
        assert repository.get_job(session, "a") is None
    for _, reason in cases.values():
        assert any(reason in r for r in reasons), (reason, reasons)


@pytest.mark.queues([{"name": "small", "quota": {CLUSTER: 4, "8xa100-40gb": 4}, "users": ["alice"]}])
def test_a_job_larger_than_its_queue_can_ever_hold_is_rejected(queued_zen):
    zen, functions = queued_zen
    functions.submit(job_request("big", cluster="8xa100-40gb"))
    functions.submit(job_request("fits"))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "big") is None
        assert repository.get_job(session, "fits").status.value == "QUEUED"
        [rejection] = repository.list_rejections(session)
    assert rejection["reason"] == "the job needs 8 GPUs of 8xa100-40gb but queue small can never hold more than 4"


COHORT = [
    {"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["alice"]},
    {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["bob"]},
]


@pytest.mark.queues(COHORT)
def test_a_flood_borrows_unused_quota_and_the_other_tenant_goes_first_when_quota_frees(queued_zen, publisher, clock):
    zen, functions = queued_zen
    flood = [f"a{n}" for n in range(10)]
    for job_id in flood:
        functions.submit(job_request(job_id))
    assert started(publisher) == flood[:4]  # team-a's 8 GPUs and team-b's unused 8 (borrowed)
    for n in (1, 2):
        functions.submit(job_request(f"b{n}", user_id="bob"))
    assert statuses(zen, "b1", "b2") == ["PENDING", "PENDING"]  # the cohort's 16 GPUs are all in use
    run_to_end(functions, "a0", "vm-0")
    run_to_end(functions, "a1", "vm-1")
    # team-b's dominant share is 0, team-a's is above 1: team-b's jobs go first, oldest first
    assert statuses(zen, "b1", "b2", "a4") == ["QUEUED", "QUEUED", "PENDING"]
    with zen.db.transaction() as session:
        summary = {row["queue"]: row for row in Queueing(zen.config).summary(PostgresJobTx(session), clock())}
    assert (summary["team-a"]["admitted_gpus"], summary["team-a"]["borrowed_gpus"]) == (8, 0)
    assert (summary["team-b"]["admitted_gpus"], summary["team-b"]["pending"]) == (8, 0)
    assert summary["team-a"]["pending"] == 6


@pytest.mark.queues([{**COHORT[0], "borrowing_limit": {CLUSTER: 4}}, COHORT[1]])
def test_borrowing_stops_at_the_borrowing_limit(queued_zen, publisher):
    zen, functions = queued_zen
    for n in range(5):
        functions.submit(job_request(f"a{n}"))
    assert started(publisher) == ["a0", "a1", "a2"]  # 8 own + 4 borrowed


@pytest.mark.queues(ONE_QUEUE)
def test_the_tick_admits_what_a_raised_quota_allows(queued_zen, config, db, publisher, clock):
    from zen.app import Zen

    zen, functions = queued_zen
    for n in range(4):
        functions.submit(job_request(f"j{n}"))
    assert started(publisher) == ["j0", "j1"]
    raised = Zen(with_queues(config, [{**ONE_QUEUE[0], "quota": {CLUSTER: 16}}]), db, publisher, clock)
    assert raised.on_scale_tick().admitted == 2
    assert started(publisher) == ["j0", "j1", "j2", "j3"]


def test_queue_configuration_errors_name_the_field(config, tmp_path):
    bad = {
        "unknown cluster": ([{"name": "q", "quota": {"nope": 4}}], "quota names unknown clusters: nope"),
        "user twice": ([{"name": "q", "quota": {CLUSTER: 4}, "users": ["al"]},
                        {"name": "r", "quota": {CLUSTER: 4}, "users": ["al"]}], "user al is in the users of queues q and r"),
        "borrow alone": ([{"name": "q", "quota": {CLUSTER: 4}, "borrowing_limit": {CLUSTER: 4}}],
                         "borrowing_limit needs a cohort"),
        "name": ([{"name": "Bad_Name", "quota": {CLUSTER: 4}}], "queues.0.name"),
        "negative": ([{"name": "q", "quota": {CLUSTER: -1}}], "queues.0.quota"),
        "twice": ([{"name": "q", "quota": {CLUSTER: 4}}, {"name": "q", "quota": {CLUSTER: 4}}], "repeated: q"),
    }
    import yaml

    from zen.core.config import load_config

    for case, (queues, expected) in bad.items():
        path = tmp_path / f"zen-queues-{case.replace(' ', '-')}.yaml"  # its own: /tmp's were shared by every run
        with open(path, "w") as f:
            yaml.safe_dump({**json.loads(config.model_dump_json()), "queues": queues}, f)
        with pytest.raises(ConfigError) as raised:
            load_config(path)
        assert expected in str(raised.value), (case, str(raised.value))


@pytest.mark.queues([{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["alice"]},
                     {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}])
def test_concurrent_submits_and_ends_never_exceed_any_quota(queued_zen, db):
    """8 threads submit and end jobs of both tenants at once while a watcher reads every committed
    state: the cohort never holds more than its 12 GPUs, team-b never more than it may."""
    zen, _ = queued_zen
    ids = itertools.count()
    violations, seen_max = [], [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            with db.transaction() as session:
                used = queue_rows.admitted_gpus(session, ["team-a", "team-b"], CLUSTER)
            total = sum(used.values())
            seen_max[0] = max(seen_max[0], total)
            if total > 12:
                violations.append(used)

    def submit(user):
        n = next(ids)
        payload = json.dumps(job_request(f"c{n}", user_id=user)).encode()
        from zen.core import eventarc

        data = eventarc.pubsub_cloud_event(payload, message_id=f"m{n}", topic="zen-job-submitted",
                                           project=zen.config.project)["data"]
        zen.on_job_submitted(f"m{n}", PUBSUB_EVENT_TYPE, data)
        return f"c{n}"

    def stop(job_id):
        from zen.core import eventarc

        payload = json.dumps({"job_id": job_id}).encode()
        data = eventarc.pubsub_cloud_event(payload, message_id=f"s-{job_id}", topic="zen-job-stop",
                                           project=zen.config.project)["data"]
        zen.on_stop_requested(f"s-{job_id}", PUBSUB_EVENT_TYPE, data)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            submitted = list(pool.map(submit, ["alice", "bob"] * 20))
            list(pool.map(stop, submitted[::2]))  # ends half of them (admitted or pending) at once
    finally:
        done.set()
        watcher.join()
    assert not violations
    assert seen_max[0] == 12  # the cohort was full at some point: the test did press on the quota
    with db.transaction() as session:
        used = queue_rows.admitted_gpus(session, ["team-a", "team-b"], CLUSTER)
        waiting = [j for j in submitted if repository.get_job(session, j).status.value == "PENDING"]
    assert sum(used.values()) == 12 and waiting  # what is left fills the quota exactly; the rest waits


@pytest.mark.queues(COHORT)
def test_zen_queues_and_zen_explain_show_quota_and_why_a_job_waits(queued_zen, db_url, tmp_path, clock, cli_forks):
    import os

    import yaml

    zen, functions = queued_zen
    for n in range(5):
        functions.submit(job_request(f"a{n}"))
        clock.advance(1)
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(zen.config.model_dump_json())))
    env = {"ZEN_CONFIG": str(path), "ZEN_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin", "USER": "alice",
           "NO_GCE_CHECK": "True",  # no metadata server to ask for an identity (google-auth's switch)
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}  # this checkout's code

    def zen_cli(*args):
        done = cli_forks.run("zen.cli.main", args, env, tmp_path, 60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    rows = {r["queue"]: r for r in json.loads(zen_cli("queues", "--json"))}
    assert (rows["team-a"]["admitted_gpus"], rows["team-a"]["borrowed_gpus"], rows["team-a"]["pending"]) == (16, 8, 1)
    assert rows["team-b"]["admitted_gpus"] == 0
    assert rows["team-a"]["you_may_submit"] == "yes" and rows["team-a"]["why_not"] is None  # no submitters: anyone
    assert "TEAM-A" not in zen_cli("queues") and "team-a" in zen_cli("queues")
    env["ZEN_ID_TOKEN"] = "garbage"  # a read command answers for $USER (submit and stop refuse such a token)
    assert json.loads(zen_cli("queues", "--json"))[0]["you_may_submit"] == "yes"
    del env["ZEN_ID_TOKEN"]
    assert "team-a:" in zen_cli("clusters")  # each cluster names the queues with quota on it
    assert zen_cli("explain", "a4").strip() == (
        f"a4: PENDING - waiting for quota: queue team-a holds 16 GPUs of {CLUSTER} (quota 8, 8 borrowed), the job needs 4; "
        "cohort lab: 16/16 GPUs in use")
    queued = zen_cli("explain", "a0")
    assert queued.startswith(f"a0: QUEUED - admitted by queue team-a; waiting for a VM of {CLUSTER}")
    # A start no VM takes (lost, expired) waits for its republish: when it comes is said, not only the scaling.
    assert re.search(r"its start was published at ([\d-]+ )?(\d\d:\d\d:\d\d), and is published again at the first "
                     r"tick after ([\d-]+ )?(\d\d:\d\d:\d\d) if no VM has claimed it \(start_republish_s\)", queued), queued
    # An ended job in one line: its final report's message (the output's tail, many lines) was printed.
    *beats, final = agent_run("a0", final="FAILED", exit_code=3)
    for beat in beats + [{**final, "message": "step 1\nTraceback (most recent call last):\n  boom"}]:
        functions.heartbeat(beat)
    assert zen_cli("explain", "a0") == "a0: FAILED - ended: exit code 3; its output: `zen logs a0`\n"


def run_until_running(functions, job_id, vm, attempt=1):
    for beat in agent_run(job_id, vm=vm, attempt=attempt)[:2]:  # CLAIMED, RUNNING
        functions.heartbeat(beat)


def stop_answer(job_id, vm, attempt=1):
    from tests.messages import heartbeat

    return heartbeat(job_id, "STOPPED", 9, attempt=attempt, vm=vm, exit_code=143)


def attempt_of(zen, job_id):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.attempt, job.max_attempts, job.preemptions


RECLAIM = [COHORT[0], {**COHORT[1], "preemption": "reclaim-borrowed"}]


def borrow_all_and_reclaim(functions, clock):
    """team-a runs 4 jobs (16 GPUs, 8 borrowed from team-b); then team-b submits b1."""
    for n in range(4):
        functions.submit(job_request(f"a{n}"))
        clock.advance(1)
        run_until_running(functions, f"a{n}", f"vm-{n}")
    functions.submit(job_request("b1", user_id="bob"))


@pytest.mark.queues(RECLAIM)
def test_a_queue_reclaims_its_lent_quota_from_a_running_borrower(queued_zen, publisher, clock):
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    # team-a holds 16 GPUs, 8 of them team-b's: the most recently admitted borrowed job is stopped
    assert statuses(zen, "b1", "a3", "a2") == ["PENDING", "STOPPING", "RUNNING"]
    stop = [json.loads(m.data) for m in publisher.on("zen-vm-control") if json.loads(m.data)["action"] == "STOP"]
    assert [(s["vm"], s["job_id"]) for s in stop] == [("vm-3", "a3")]
    assert stop[0]["reason"].startswith("preempted: a 4-GPU job of queue team-b")
    [event] = [json.loads(m.data) for m in publisher.on("zen-job-events") if m.attributes["type"] == "job.preempted"]
    assert (event["job_id"], event["queue"]) == ("a3", "team-a")
    functions.submit(job_request("b2", user_id="bob"))  # a preemption is under way: no second victim yet
    assert statuses(zen, "a2", "b2") == ["RUNNING", "PENDING"]

    functions.heartbeat(stop_answer("a3", "vm-3"))  # the agent stopped it (SIGTERM, grace): quota freed
    assert statuses(zen, "a3", "b1") == ["PENDING", "QUEUED"]
    assert attempt_of(zen, "a3") == (2, 4, 1)  # a new attempt that does not spend the budget (3 -> 4)
    # b2 gets the next preemption, and then a3's second attempt waits for quota like any job
    assert statuses(zen, "a2", "b2") == ["STOPPING", "PENDING"]
    functions.heartbeat(stop_answer("a2", "vm-2"))
    assert statuses(zen, "a2", "a3", "b2") == ["PENDING", "PENDING", "QUEUED"]
    run_to_end(functions, "a0", "vm-0")
    assert status(zen, "a2") == "QUEUED"  # team-a's own quota again; the oldest of its jobs first
    [start] = [json.loads(m.data) for m in publisher.on("zen-job-start") if json.loads(m.data)["job_id"] == "a2"
               and json.loads(m.data)["attempt"] == 2]
    assert start["env"]["ZEN_PREEMPTED"] == "1"


@pytest.mark.queues([{**ONE_QUEUE[0], "preemption": "lower-priority"}])
def test_a_higher_priority_job_preempts_the_cheapest_lower_priority_one(queued_zen, publisher, clock):
    zen, functions = queued_zen
    functions.submit(job_request("low-old", priority=1))
    clock.advance(1)
    functions.submit(job_request("lowest", priority=0))
    clock.advance(1)
    run_until_running(functions, "low-old", "vm-1")
    functions.submit(job_request("same", priority=0))  # no higher priority: waits, preempts nothing
    assert statuses(zen, "low-old", "lowest", "same") == ["RUNNING", "QUEUED", "PENDING"]
    functions.submit(job_request("urgent", priority=9))
    # the lowest priority goes first; not yet on a VM, it is back to PENDING at once and urgent is in
    assert statuses(zen, "lowest", "urgent", "low-old") == ["PENDING", "QUEUED", "RUNNING"]
    assert attempt_of(zen, "lowest") == (2, 4, 1)


@pytest.mark.queues(RECLAIM)
def test_a_user_stop_during_a_preemption_wins(queued_zen, clock):
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    functions.stop({"job_id": "a3"})
    functions.heartbeat(stop_answer("a3", "vm-3"))
    assert statuses(zen, "a3", "b1") == ["CANCELLED", "QUEUED"]


@pytest.mark.queues(RECLAIM)
def test_a_silent_preempted_vm_gives_the_quota_back_at_the_stop_deadline(queued_zen, clock):
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)
    clock.advance(zen.config.deadlines.stop_timeout_s + 1)
    for n in range(3):  # the others keep reporting
        functions.heartbeat(agent_run(f"a{n}", vm=f"vm-{n}", running_beats=3)[2])
    zen.on_scale_tick()
    assert statuses(zen, "a3", "b1") == ["PENDING", "QUEUED"]


def test_zen_submit_checks_the_queue_with_the_functions_rules(config):
    """``zen submit`` refuses before publishing through ``resolve_request``, the function's own rules."""
    from zen.core.errors import Rejected
    from zen.core.models import JobRequest
    from zen.jobs.placement import resolve_request

    queued = with_queues(config, ONE_QUEUE)
    assert resolve_request(queued, JobRequest.model_validate(job_request("x"))).queue == "research"
    with pytest.raises(Rejected, match="unknown queue 'nope'"):
        resolve_request(queued, JobRequest.model_validate(job_request("x", queue="nope")))
    assert resolve_request(config, JobRequest.model_validate(job_request("x"))).queue is None
