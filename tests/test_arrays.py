"""Job arrays (zen.core.arrays, zen.jobs.arrays) through the functions against a real Postgres: one message
becomes N tasks, each with its index and parameters; max_parallel lets K go at once and the next when one
ends; a stop of the array stops every task; bad arrays are refused whole, with the reason."""

from __future__ import annotations

import json
import threading

import pytest

from tests.messages import agent_run, job_request
from tests.test_queues import ONE_QUEUE, queued_zen, with_queues  # noqa: F401 (queued_zen: a fixture)
from zen.store import repository


def jobs(zen, *job_ids):
    with zen.db.transaction() as session:
        return [repository.get_job(session, j) for j in job_ids]


def statuses(zen, prefix: str, n: int) -> list[str]:
    return [j.status.value if j else "-" for j in jobs(zen, *(f"{prefix}-{i}" for i in range(n)))]


def starts(publisher) -> list[str]:
    return [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-start")]


def refusals(zen) -> list[str]:
    """The reasons of the refused messages, oldest first."""
    with zen.db.transaction() as session:
        return [r["reason"] for r in session.sql("SELECT reason FROM rejected_messages ORDER BY id")]


def finish(fn, job_id: str, vm: str, final: str = "SUCCEEDED") -> None:
    for beat in agent_run(job_id, vm=vm, final=final, exit_code=0 if final == "SUCCEEDED" else 3):
        fn.heartbeat(beat)


def test_an_array_is_n_tasks_and_max_parallel_lets_k_run_at_once(zen_and_fn, publisher):
    zen, fn = zen_and_fn
    params = [{"LR": lr} for lr in ("0.1", "0.01", "0.001", "0.3", "0.03", "0.003")]
    fn.submit(job_request("sweep", array={"params": params, "max_parallel": 2}))
    assert statuses(zen, "sweep", 6) == ["QUEUED", "QUEUED", "PENDING", "PENDING", "PENDING", "PENDING"]
    assert jobs(zen, "sweep")[0] is None  # the array's id names no job
    task = jobs(zen, "sweep-4")[0]
    assert task.request["env"] == {"LR": "0.03", "ZEN_ARRAY_ID": "sweep", "ZEN_ARRAY_INDEX": "4",
                                   "ZEN_ARRAY_COUNT": "6"}
    assert task.hold == "array sweep lets 2 tasks run at once"
    assert sorted(starts(publisher)) == ["sweep-0", "sweep-1"]

    fn.submit(job_request("sweep", array={"params": params, "max_parallel": 2}))  # a redelivery: nothing new
    assert statuses(zen, "sweep", 6)[2:] == ["PENDING"] * 4

    finish(fn, "sweep-0", "vm-a")  # one ends: the next in index order is let go
    assert statuses(zen, "sweep", 6) == ["SUCCEEDED", "QUEUED", "QUEUED", "PENDING", "PENDING", "PENDING"]
    assert jobs(zen, "sweep-2")[0].hold is None
    finish(fn, "sweep-1", "vm-b", final="FAILED")  # a failure frees its place as well
    finish(fn, "sweep-2", "vm-a")
    assert statuses(zen, "sweep", 6) == ["SUCCEEDED", "FAILED", "SUCCEEDED", "QUEUED", "QUEUED", "PENDING"]
    with zen.db.transaction() as session:
        history = [r["reason"] for r in session.run("job_history", job_id="sweep-3")]
    assert any("let go: fewer than 2 tasks of array sweep run" in r for r in history), history


def test_a_stop_of_the_array_stops_every_task_and_lets_none_go(zen_and_fn, publisher):
    zen, fn = zen_and_fn
    fn.submit(job_request("arr", array={"count": 4, "max_parallel": 2}))
    for beat in agent_run("arr-0", vm="vm-a")[:2]:  # arr-0 runs
        fn.heartbeat(beat)
    fn.stop({"job_id": "arr", "reason": "enough"})
    assert statuses(zen, "arr", 4) == ["STOPPING", "CANCELLED", "CANCELLED", "CANCELLED"]
    assert sorted(starts(publisher)) == ["arr-0", "arr-1"]  # no held task was let go on the way


def test_a_stop_of_the_array_that_came_before_it_stops_every_task(zen_and_fn, publisher, clock):
    """Pub/Sub does not order across topics: `zen stop arr` may be delivered before the array's submission.
    The stop is kept under the array's id; its tasks (arr-0, ...) were never stopped by it and all ran."""
    zen, fn = zen_and_fn
    fn.stop({"job_id": "arr", "reason": "submitted by mistake"})
    fn.submit(job_request("arr", array={"count": 3, "max_parallel": 2}))
    assert statuses(zen, "arr", 3) == ["CANCELLED"] * 3 and starts(publisher) == []
    with zen.db.transaction() as session:
        assert "stopped before it arrived: submitted by mistake" in [
            r["reason"] for r in session.run("job_history", job_id="arr-2")]
    # One that crossed the submission (each transaction missed the other's row) is applied by the tick.
    fn.submit(job_request("crossed", array={"count": 2}))
    with zen.store.transaction() as tx:
        tx.remember_early_stop("crossed", "crossed its submission", clock())
    fn.tick()
    assert statuses(zen, "crossed", 2) == ["CANCELLED", "CANCELLED"]


def test_a_job_may_not_take_an_arrays_id(zen_and_fn):
    """An array's id that is a job's is refused; a job whose id is an array's was accepted, and a stop of the
    array then named that job (its owner's `zen stop` stopped someone else's job, or was refused)."""
    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 2}))
    fn.submit(job_request("sweep"))
    assert jobs(zen, "sweep") == [None]
    assert "job_id sweep is an array's id (its tasks are sweep-0, ...): give the job another id" in refusals(zen)[-1]
    fn.stop({"job_id": "sweep"})
    assert statuses(zen, "sweep", 2) == ["CANCELLED", "CANCELLED"]


def test_an_arrays_task_may_not_take_another_arrays_id(zen_and_fn):
    """Alice's array a-1 (tasks a-1-0, a-1-1) and her step after it; bob's array `a` would make task a-1, which
    is her array's id: her step would follow bob's job, and her stop of a-1 reach it. Refused whole."""
    zen, fn = zen_and_fn
    fn.submit(job_request("a-1", array={"count": 2}))
    fn.submit(job_request("pick", after=["a-1"]))
    fn.submit(job_request("a", user_id="bob", array={"count": 2}))
    assert jobs(zen, "a-0", "a-1") == [None, None]
    assert "job_id a-1, a task's id of array a, is already an array's id" in refusals(zen)[-1]
    fn.stop({"job_id": "a-1"})
    assert statuses(zen, "a-1", 2) == ["CANCELLED", "CANCELLED"]


def submitted_meanwhile(zen, fn, task_id, request):
    """``request`` submitted by another function instance while the array's transaction has inserted its task
    ``task_id`` and not committed: it may wait for that commit, so it runs in a thread of its own."""
    racing: list[threading.Thread] = []

    def submit(inserted, job, *rest):  # the insert_job hook: (its result, the job)
        if job.job_id == task_id and not racing:
            racing.append(threading.Thread(target=fn.submit, args=(request,)))
            racing[0].start()
            racing[0].join(timeout=1.0)  # done by now, unless it waits for this transaction

    zen.store.hooks.after("insert_job", submit)
    return racing


@pytest.mark.parametrize("first, meanwhile, task, absent, reason", [
    (("sweep", {"count": 2}), ("sweep", None), "sweep-0", "sweep",  # a job of the array's id
     "job_id sweep is an array's id"),
    (("a-1", {"count": 2}), ("a", {"count": 2}), "a-1-0", "a-0",  # an array whose task a-1 is the array's id
     "job_id a-1, a task's id of array a, is already an array's id"),
    # An array named as another's task 0, either first: jobs_one_namespace files task 0 under its array's id, so
    # task b-0 holds no "b-0" for array b-0's task 0 to meet (each array takes its id and its task 0's, b-0 both)
    (("b", {"count": 2}), ("b-0", {"count": 2}), "b-0", "b-0-0", "job_id b-0 is already a job's"),
    (("b-0", {"count": 2}), ("b", {"count": 2}), "b-0-0", "b-1", "job_id b-0, a task's id of array b, is already an array's id"),
])
def test_one_id_submitted_at_once_as_an_array_and_as_another_is_accepted_once(zen_and_fn, first, meanwhile, task,
                                                                             absent, reason):
    """Each looked for the other before either committed: both were accepted, and a stop of the array
    stopped the other's job (bob's stop of his array b-0 cancelled alice's task b-0, his own tasks ran on). The
    second now waits for the first's commit and is refused with the reason."""
    zen, fn = zen_and_fn
    array_id, array = first
    racing = submitted_meanwhile(zen, fn, task, job_request(meanwhile[0], user_id="bob", array=meanwhile[1]))
    fn.submit(job_request(array_id, array=array))
    zen.store.hooks.clear()
    racing[0].join(timeout=30)
    assert statuses(zen, array_id, 2) == ["QUEUED", "QUEUED"]
    assert jobs(zen, absent) == [None]
    assert reason in refusals(zen)[-1], refusals(zen)
    fn.stop({"job_id": array_id})
    assert statuses(zen, array_id, 2) == ["CANCELLED", "CANCELLED"]


def test_a_stopped_task_frees_its_place_however_it_waited(zen_and_fn):
    """A let-go task that ends lets the next go, also one stopped while it waits out its retry's backoff (its
    hold said so: nothing of the array ran), and one stopped by a stop that came before its array (applied as
    the array was created)."""
    zen, fn = zen_and_fn
    fn.submit(job_request("rz", array={"count": 3, "max_parallel": 1}, max_retries=1, retry_backoff_s=600))
    finish(fn, "rz-0", "vm-a", final="FAILED")
    assert statuses(zen, "rz", 2) == ["PENDING", "PENDING"]  # rz-0 waits out its backoff, rz-1 held
    fn.stop({"job_id": "rz-0"})
    assert statuses(zen, "rz", 3) == ["CANCELLED", "QUEUED", "PENDING"]
    fn.stop({"job_id": "zz-0"})  # kept: zz is not there yet
    fn.submit(job_request("zz", array={"count": 3, "max_parallel": 1}))
    assert statuses(zen, "zz", 3) == ["CANCELLED", "QUEUED", "PENDING"]


def test_the_ticks_look_at_arrays_is_not_taken_up_by_arrays_without_room(zen_and_fn):
    """The tick lets go the next task of at most 100 arrays; it read any 100 holding tasks, and arrays with no
    room (one task running, the rest held, as they should) could fill it for ever. It reads those with room."""
    from zen.store.jobstore import PostgresJobTx

    zen, fn = zen_and_fn
    for n in range(3):
        fn.submit(job_request(f"busy{n}", array={"count": 2, "max_parallel": 1}))
    fn.submit(job_request("zz", array={"count": 3, "max_parallel": 1}))
    with zen.db.transaction() as session:  # zz-0 ended as if by a release that reached for nothing
        session.sql("UPDATE jobs SET status = 'CANCELLED' WHERE job_id = 'zz-0'")
    with zen.db.transaction() as session:
        assert PostgresJobTx(session).arrays_holding(100) == ["zz"]
    fn.tick()
    assert statuses(zen, "zz", 3) == ["CANCELLED", "QUEUED", "PENDING"]


def test_an_arrays_id_reused_for_another_array_is_refused_and_a_redelivery_is_not(zen_and_fn):
    """Only the first task's request was compared: an array of other params under the same id was taken for a
    redelivery and dropped without a word."""
    zen, fn = zen_and_fn
    first = job_request("lr", array={"params": [{"LR": "0.1"}, {"LR": "0.2"}]})
    fn.submit(first)
    fn.submit(first)  # redelivered: nothing more, nothing refused
    fn.submit(job_request("lr", array={"params": [{"LR": "0.1"}, {"LR": "0.3"}]}))
    assert jobs(zen, "lr-1")[0].request["env"]["LR"] == "0.2"
    rows = refusals(zen)
    assert len(rows) == 1 and "job_id lr is already an array's of other tasks" in rows[0], rows


def test_the_tick_lets_go_what_a_release_missed(zen_and_fn, publisher):
    """Two tasks ending at once may both reach for the same next task; the sweep catches it up."""
    from zen.core import lifecycle
    from zen.core.lifecycle import Decision
    from zen.core.models import JobStatus

    zen, fn = zen_and_fn
    fn.submit(job_request("gap", array={"count": 3, "max_parallel": 1}))
    with zen.db.transaction():
        pass
    service = zen.jobs
    with service._store.transaction() as tx:  # gap-0 ends without the release a change runs
        job = tx.get_job("gap-0", lock=True)
        service.decisions.apply(tx, job, Decision(changes=[lifecycle.Change(JobStatus.CANCELLED, "test")]),
                                actor="test", now=zen.clock(), admit=False)
    assert statuses(zen, "gap", 3) == ["CANCELLED", "PENDING", "PENDING"]
    fn.tick()
    assert statuses(zen, "gap", 3) == ["CANCELLED", "QUEUED", "PENDING"]


@pytest.mark.parametrize("array, reason", [
    ({"count": 1001}, "array: 1001 tasks, more than this Zen's limits.max_array_tasks (1000)"),
    ({"count": 2, "params": [{"A": "1"}]}, "count is 2 but params has 1 entries"),
    ({"params": [{"ZEN_ARRAY_INDEX": "9"}]}, "ZEN_ARRAY_INDEX: names starting with ZEN_ are Zen's"),
    ({"count": 2, "max_parallel": 0}, "array.max_parallel"),
    ({}, "give count (the number of tasks) or params"),
])
def test_a_bad_array_is_refused_with_its_reason(zen_and_fn, array, reason):
    zen, fn = zen_and_fn
    fn.submit(job_request("bad", array=array))
    assert jobs(zen, "bad-0") == [None]
    with zen.db.transaction() as session:
        rows = [r["reason"] for r in session.sql("SELECT reason FROM rejected_messages ORDER BY id DESC LIMIT 1")]
    assert reason in rows[0], rows


def test_a_task_id_another_job_holds_refuses_the_whole_array(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("taken-1"))
    fn.submit(job_request("taken", array={"count": 3}))
    assert [j is None for j in jobs(zen, "taken-0", "taken-2")] == [True, True]
    with zen.db.transaction() as session:
        rows = [r["reason"] for r in session.sql("SELECT reason FROM rejected_messages ORDER BY id DESC LIMIT 1")]
    assert "job_id taken-1 (task 1 of array taken) is already used by another job" in rows[0]


def test_with_queues_held_tasks_wait_outside_the_line(config, db, publisher, clock):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(with_queues(config, ONE_QUEUE), db, publisher, clock)  # 8 GPUs: two 4-GPU jobs at once
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("q", array={"count": 4, "max_parallel": 1}))
    fn.submit(job_request("other"))
    assert statuses(zen, "q", 4) == ["QUEUED", "PENDING", "PENDING", "PENDING"]
    assert jobs(zen, "other")[0].status.value == "QUEUED"  # held tasks take no place in the queue's line
    finish(fn, "q-0", "vm-a")
    assert statuses(zen, "q", 4) == ["SUCCEEDED", "QUEUED", "PENDING", "PENDING"]


def test_the_cli_lists_explains_and_stops_an_array(zen_and_fn, db_url, monkeypatch, capsys):
    from zen.cli.main import main
    from zen.cli.user import _stop_outlook

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("cli", array={"count": 3, "max_parallel": 1}))
    finish(fn, "cli-0", "vm-a", final="FAILED")
    capsys.readouterr()
    assert main(["jobs", "list", "--array", "cli"]) == 0
    out = capsys.readouterr().out
    assert "array cli: 3 tasks: 1 failed, 2 waiting (1 held by max_parallel)" in out
    assert "cli-2" in out and "cli-0" in out
    assert main(["explain", "cli"]) == 0
    out = capsys.readouterr().out
    assert "the rest wait because the array cli lets 1 task run at once" in out
    assert "cli-1: QUEUED" in out  # then why the next task waits, in its own words
    assert _stop_outlook("cli")[0] == "array cli: 2 of its 3 tasks have not ended: they will be stopped"
    assert main(["explain", "nothing-here"]) == 1
    assert "no job, array or cluster named nothing-here" in capsys.readouterr().err


def test_zen_submit_refuses_an_array_too_large_and_another_users_dependency_before_publishing(
        zen_and_fn, db_url, monkeypatch, capsys):
    from zen.cli.main import main

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("bobs-job", user_id="bob"))
    assert main(["submit", "--user", "alice", "--cluster", "4xa100-40gb", "--array", "1001", "--", "true"]) == 1
    assert "Zen would refuse this array: array: 1001 tasks, more than this Zen's limits.max_array_tasks (1000)" \
        in capsys.readouterr().err
    assert main(["submit", "--user", "alice", "--cluster", "4xa100-40gb", "--after", "bobs-job", "--", "true"]) == 1
    assert "--after bobs-job: alice may not wait for job bobs-job, which is bob's" in capsys.readouterr().err
    # a task id past 0 that a job holds: the function refuses the array whole (the CLI published it, "submitted")
    fn.submit(job_request("train-1", user_id="alice"))
    assert main(["submit", "--user", "alice", "--job-id", "train", "--cluster", "4xa100-40gb", "--array", "3",
                 "--", "true"]) == 1
    assert "job_id train-1 (task 1 of array train) is already another job's or array's" in capsys.readouterr().err


def test_concurrent_ends_never_let_more_than_max_parallel_go_and_the_tick_fills_what_they_missed(zen_and_fn, db):
    """6 threads end an array's let-go tasks as they come while a watcher reads every committed state: never
    more than max_parallel let go and not ended; the races that let fewer go are made up by the tick."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from zen.core import eventarc
    from zen.core.events import PUBSUB_EVENT_TYPE

    zen, fn = zen_and_fn
    fn.submit(job_request("race", array={"count": 40, "max_parallel": 4}))
    violations, seen = [], [0]
    done = threading.Event()

    def let_go() -> list[str]:
        with db.transaction() as session:
            rows = session.sql("SELECT job_id FROM jobs WHERE array_id = 'race' AND hold IS NULL "
                               "AND status IN ('QUEUED','ASSIGNED','RUNNING','STOPPING','LOST','PENDING')")
        return [r["job_id"] for r in rows]

    def watch():
        while not done.is_set():
            n = len(let_go())
            seen[0] = max(seen[0], n)
            if n > 4:
                violations.append(n)

    ended: set[str] = set()
    lock = threading.Lock()

    def end(job_id: str) -> None:
        for beat in agent_run(job_id, vm=f"vm-{job_id}"):
            data = eventarc.pubsub_cloud_event(json.dumps(beat).encode(), message_id=f"{job_id}-{beat['seq']}",
                                               topic="zen-heartbeats", project=zen.config.project)["data"]
            zen.on_heartbeat(data["message"]["messageId"], PUBSUB_EVENT_TYPE, data)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(6) as pool:
            deadline = time.monotonic() + 60
            while len(ended) < 40 and time.monotonic() < deadline:
                ready = [j for j in let_go() if j not in ended]
                if not ready:
                    fn.tick()  # what two ends at once both reached for
                    continue
                with lock:
                    ended.update(ready)
                list(pool.map(end, ready))
    finally:
        done.set()
        watcher.join()
    assert not violations and seen[0] == 4
    assert statuses(zen, "race", 40) == ["SUCCEEDED"] * 40


def test_with_queues_a_stop_before_the_array_stops_every_task(config, db, publisher, clock):
    """With queues, each kept stop (PENDING -> CANCELLED) ran the queue's admission pass, which admitted the
    tasks not stopped yet; the next stop then worked on its stale copy: ConcurrentChange, the function
    answered 500 and every redelivery failed the same way. The tasks are admitted once, after the stops."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(with_queues(config, ONE_QUEUE), db, publisher, clock)
    fn = FunctionsInvoker(zen)
    fn.stop({"job_id": "arr", "reason": "submitted by mistake"})
    fn.submit(job_request("arr", array={"count": 3}))
    assert statuses(zen, "arr", 3) == ["CANCELLED"] * 3
    assert starts(publisher) == []


def test_a_stop_that_crossed_an_arrays_submission_lets_no_held_task_go_on_the_way(zen_and_fn, publisher, clock):
    """The tick's path (Sweeps._apply_array_early_stops) stopped the tasks in index order, each ending task
    letting the next held one go (QUEUED, its start published) before that one was stopped in turn: every
    held task's start went out for a job already CANCELLED. Held tasks first now, admitted once."""
    zen, fn = zen_and_fn
    fn.submit(job_request("crossed", array={"count": 4, "max_parallel": 1}))
    with zen.store.transaction() as tx:
        tx.remember_early_stop("crossed", "crossed its submission", clock())
    fn.tick()
    assert statuses(zen, "crossed", 4) == ["CANCELLED"] * 4
    assert starts(publisher) == ["crossed-0"]  # the one start the submission sent


def test_a_redelivered_array_whose_dependency_failed_since_is_a_duplicate_not_a_refusal(zen_and_fn):
    """As a job's redelivery is: the array was accepted; it is not recorded (nor announced) as refused."""
    zen, fn = zen_and_fn
    fn.submit(job_request("first"))
    fn.submit(job_request("sweep", after=["first"], array={"count": 2}), message_id="m-sweep")
    for beat in agent_run("first", final="FAILED", exit_code=2):
        fn.heartbeat(beat)
    assert statuses(zen, "sweep", 2) == ["CANCELLED", "CANCELLED"]
    fn.submit(job_request("sweep", after=["first"], array={"count": 2}), message_id="m-sweep")  # redelivered
    assert refusals(zen) == []
    fn.submit(job_request("sweep", after=["first"], array={"count": 3}))  # another array of that id: refused
    assert "could never start" in refusals(zen)[-1]


def test_a_redelivered_array_is_a_duplicate_after_max_array_tasks_is_lowered(zen_and_fn, config, db, publisher, clock):
    """The size limit was checked before the array made was looked for: the redelivery of 5 tasks that run was
    recorded and announced as refused once the limit was 3."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 5}), message_id="m-sweep")
    lowered = config.model_copy(update={"limits": config.limits.model_copy(update={"max_array_tasks": 3})})
    after = FunctionsInvoker(Zen(lowered, db, publisher, clock))
    after.submit(job_request("sweep", array={"count": 5}), message_id="m-sweep")  # redelivered
    assert statuses(zen, "sweep", 5) == ["QUEUED"] * 5 and refusals(zen) == []
    after.submit(job_request("sweep2", array={"count": 5}))  # a new one: refused
    assert "more than this Zen's limits.max_array_tasks (3)" in refusals(zen)[-1]


def test_a_dependency_that_ends_lets_the_first_tasks_go(zen_and_fn):
    """12 tasks after `dep`, 3 at once: its end looked at its waiting jobs by job_id (arr-0, arr-1, arr-10, ...),
    letting each go as it came: arr-10 went, arr-2 to arr-9 waited. Tasks are submitted in index order now."""
    zen, fn = zen_and_fn
    fn.submit(job_request("dep"))
    fn.submit(job_request("arr", array={"count": 12, "max_parallel": 3}, after=["dep"]))
    for beat in agent_run("dep", vm="vm-d"):
        fn.heartbeat(beat)
    assert statuses(zen, "arr", 12) == ["QUEUED"] * 3 + ["PENDING"] * 9


@pytest.mark.queues(ONE_QUEUE)  # 8 GPUs: two 4-GPU tasks admitted at once
def test_a_queue_admits_an_arrays_tasks_in_index_order(queued_zen):
    """max_parallel 4, room for 2: the queue's line broke the tasks' tie by job_id, so arr-10 (let go after arr-8
    and arr-9) was admitted before them (in a 1,000-task array arr-99 started 989th)."""
    zen, fn = queued_zen
    fn.submit(job_request("arr", array={"count": 12, "max_parallel": 4}))
    started: list[str] = []
    for _ in range(12):
        queued = [f"arr-{i}" for i, s in enumerate(statuses(zen, "arr", 12)) if s == "QUEUED"]
        started += [q for q in queued if q not in started]
        if not queued:
            break
        for beat in agent_run(queued[0], vm=f"vm-{queued[0]}"):  # the oldest admitted ends first
            fn.heartbeat(beat)
    assert started == [f"arr-{i}" for i in range(12)]


def test_an_arrays_line_counts_as_held_by_max_parallel_the_tasks_it_holds_only(zen_and_fn, db_url, monkeypatch,
                                                                               capsys):
    """A task waiting out its retry's backoff, and a stopped task that kept its hold, were counted "held by
    max_parallel", and the rest's wait explained by the retry's hold."""
    from zen.cli.main import main

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("rz", array={"count": 3, "max_parallel": 1}, max_retries=1, retry_backoff_s=600))
    for beat in agent_run("rz-0", vm="vm-a", final="FAILED", exit_code=3):  # rz-0 waits out its retry's backoff
        fn.heartbeat(beat)
    fn.submit(job_request("st", array={"count": 4, "max_parallel": 1}))
    fn.stop({"job_id": "st-3"})  # CANCELLED (its hold stays on the row)
    capsys.readouterr()
    assert main(["explain", "rz"]) == 0
    assert ("3 waiting (2 held by max_parallel); the rest wait because the array rz lets 1 task run at once"
            in capsys.readouterr().out)
    assert main(["jobs", "list", "--array", "st"]) == 0
    assert "1 cancelled, 3 waiting (2 held by max_parallel)" in capsys.readouterr().out
