"""The queries of the hot paths (submit, heartbeat, stop) and of the tick's sweeps find their rows
through an index: EXPLAIN on a database holding 60,000 jobs (and as many outbox rows) never shows a
sequential scan of ``jobs`` or ``outbox``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from tests.databases import cloned_database

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def big_db(pg_server, template_db):
    """A migrated database with 60k jobs: mostly finished, 5k queued, 5k running, a third in queues; 60k outbox rows."""
    with cloned_database(pg_server, template_db, "plans_big") as db:
        with db.transaction() as session:
            session.sql("""
                INSERT INTO jobs (job_id, status, attempt, max_attempts, cluster, user_id, priority, regions, request,
                                  request_hash, last_seq, submitted_at, queued_at, start_published_at, updated_at,
                                  vm, last_heartbeat_at, queue, gpus)
                SELECT 'job-' || i,
                       CASE WHEN i % 12 = 0 THEN 'QUEUED' WHEN i % 12 = 1 THEN 'RUNNING' ELSE 'SUCCEEDED' END,
                       1, 3, CASE WHEN i % 2 = 0 THEN '1xl4' ELSE '4xa100-40gb' END, 'u', 0, '["us-central1"]', '{}',
                       'h', 0, t.now - i * interval '1 second', t.now, t.now, t.now,
                       CASE WHEN i % 12 = 1 THEN 'vm-' || i END, t.now,
                       CASE WHEN i % 3 = 0 THEN 'q' || (i % 4) END, 4
                FROM generate_series(1, 60000) AS i, (SELECT CAST(:now AS timestamptz) AS now) AS t""", now=NOW)
            session.sql("""
                INSERT INTO outbox (topic, data, attributes, created_at, sent_at)
                SELECT 'zen-job-events', '\\x7b7d', '{}', t.now, CASE WHEN i > 100 THEN t.now END
                FROM generate_series(1, 60000) AS i, (SELECT CAST(:now AS timestamptz) AS now) AS t""", now=NOW)
        with db.session() as session:
            session.execute("ANALYZE")
        yield db


def _listing(**given):
    """``recent_jobs``'s parameters: every filter off but those given."""
    return {**dict(status=None, cluster=None, user_id=None, since=None, labels="{}", limit=50, queue=None, array_id=None,
                   before_at=None, before_id=None, owner=None), **given}


HOT_QUERIES = [
    ("lock_job", {"job_id": "job-7"}),
    ("get_job", {"job_id": "job-7"}),
    ("record_progress", {"job_id": "job-13", "attempt": 1, "vm": "vm-13", "seq": 9, "message": None, "now": NOW,
                         "vm_since": NOW}),
    ("update_job", dict(job_id="job-7", expected_status="RUNNING", expected_attempt=1, status="RUNNING", attempt=1,
                        vm="vm-7", region=None, zone=None, last_seq=3, last_heartbeat_at=NOW, queued_at=NOW,
                        started_at=NOW, finished_at=None, exit_code=None, message=None, start_published_at=NOW,
                        max_attempts=3, preempted_by=None, stop_reason=None, preemptions=0, start_regions=None, widen_at=None,
                        start_vms=None, regions='["us-central1"]', hold=None, hold_until=None, retries=0, gang=None, left_vms=None, heard_at=None,
                        fence_timeout_s=None, now=NOW)),
    ("take_early_stops", {"job_id": "job-7"}),
    ("kept_stop_names", {"job_id": "sweep-3-1"}),  # every claim: a stop kept for the job or for its array
    # The end of an attempt also records its usage (its claim time read from the job's history, its VM's model
    # from the scaling passes' records).
    ("insert_attempt_usage", dict(job_id="job-13", attempt=1, user_id="u", queue=None, cluster="4xa100-40gb",
                                  machine_type="a2-highgpu-4g", region="us-central1", vm="vm-13", gpus=4,
                                  ran_from=NOW, ended_at=NOW, outcome="SUCCEEDED", gpu_factor=1.0, use_catalog=True,
                                  vms='[{"rank": 0, "vm": "vm-13", "model": "spot", "share": 1.0}]', fixed="{}",
                                  fallback='{"spot": 5.17}')),
    ("held_jobs_silent_since", {"cutoff": NOW - timedelta(minutes=2), "stop_cutoff": NOW - timedelta(minutes=10),
                                "preempted_cutoff": NOW - timedelta(minutes=10), "limit": 500,
                                "timeout_s": 120.0}),  # each its deadline (a running one's fence: zen.core.lease)
    ("queued_jobs_published_before", {"cutoff": NOW - timedelta(hours=1), "limit": 500}),
    ("queued_jobs_to_widen", {"now": NOW, "limit": 500}),  # the tick widens starts narrowed near their data
    ("gangs_assembling_in", {"cluster": "4xa100-40gb", "regions": ["us-west1"], "limit": 500}),  # at a stockout
    # QUEUED jobs allowed a region whose tags lack theirs (the configuration changed), before the scaling pass
    ("queued_jobs_uncleared", {"cluster": "4xa100-40gb", "carried": '{"us-west1": ["hipaa"]}', "limit": 500}),
    ("early_stops_of_submitted_jobs", {"limit": 500}),  # stops that raced their submission
    ("pending_jobs", {"limit": 500, "queue_less": False}),  # without queues, the tick admits jobs left PENDING by removed queues
    ("pending_jobs", {"limit": 500, "queue_less": True}),  # with queues, the jobs of none (held before queues came)
    ("queued_demand", {"cluster": "1xl4", "now": NOW, "bound": 600, "with_inputs": False}),  # the planner's demand, by the regions each start reaches now
    ("vm_holds_job", {"vm_name": "vm-13", "left_running": "x"}),
    # Each submission of a job with inputs or an image looks for warm VMs (zen.core.routing).
    ("vms_holding", dict(cluster="1xl4", regions='["us-central1"]', inputs='["gs://b/x"]', image=None,
                         seen_after=NOW - timedelta(minutes=3), limit=20)),
    # Several jobs per VM: a claim reads the VM's jobs; a scaling pass the VMs' loads and the demand by GPUs.
    ("jobs_on_vm", {"vm_name": "vm-13"}),
    ("vm_loads_of_cluster", {"cluster": "1xl4"}),
    ("queued_demand_by_gpus", {"cluster": "1xl4", "now": NOW, "bound": 600}),
    ("held_vms_of_cluster", {"cluster": "1xl4", "left_running": "x"}),  # with a gang's nodes (jobs_gangs)
    ("arrivals_since", {"cluster": "1xl4", "since": NOW - timedelta(minutes=10)}),
    ("lock_outbox_unsent", {"cutoff": NOW - timedelta(minutes=1), "limit": 1000}),
    ("prune_outbox", {"cutoff": NOW - timedelta(days=1), "limit": 5000}),
    # What users read: `zen jobs list` (newest first, filtered) and `zen watch` (active jobs).
    ("recent_jobs", _listing()),
    ("recent_jobs", _listing(user_id="alice")),
    ("recent_jobs", _listing(status="RUNNING", cluster="1xl4", since=NOW - timedelta(hours=2), labels='{"team": "vision"}')),
    ("recent_jobs", _listing(array_id="sweep-3")),
    # The console's queues page: the jobs waiting in a queue, as a member of it sees them (its own, the others').
    ("recent_jobs", _listing(status="PENDING", queue="q1", limit=20, owner="u2")),
    ("recent_jobs", _listing(status="QUEUED", queue="q1", limit=20)),
    ("active_jobs", {"limit": 23}),
    ("rejections_of_job", {"job_id": "job-9", "message_id": None}),  # `zen submit --wait` polls it
    ("count_active_jobs", {}),
    ("pending_of_queue", {"queue": "q1", "cluster": "1xl4", "limit": 200, "most": 8}),
    ("admitted_gpus", {"queues": '["q0", "q1"]', "cluster": "1xl4"}),
    ("waiting_queues", {}),
    ("queue_counts", {}),  # `zen queues` and the console's queues page, every few seconds a tab is open
    ("preemption_candidates", {"queues": '["q0", "q1"]', "cluster": "1xl4", "limit": 50}),
    # Arrays: each task's end counts its array and takes the next held task; the tick looks for held ones.
    ("array_let_go", {"array_id": "sweep-3"}),
    ("array_next_held", {"array_id": "sweep-3"}),
    ("arrays_holding", {"limit": 100}),
    ("retry_due", {"now": NOW, "limit": 500, "kind": "no region of its may run it now: %", "of_kind": False}),
    ("waiting_after", {"names": '["job-7", "sweep-3"]'}),
    ("held_after", {"limit": 200}),
    ("jobs_ahead", {"queue": "q1", "cluster": "1xl4", "priority": 0, "submitted_at": NOW, "job_id": "job-9",
                    "most": 8}),
    ("queue_head", {"queue": "q1", "cluster": "1xl4", "most": 8}),
    # The tick's look for jobs short of a region added to their cluster (its queued jobs here allow all it has).
    ("queued_jobs_short", {"cluster": "1xl4", "carried": '{"us-central1": []}', "limit": 500}),
    # The tick's look for jobs asking more GPUs of a VM than their cluster's VMs have now (its gpu_count lowered).
    ("queued_jobs_gpus_above", {"cluster": "1xl4", "gpu_count": 1, "limit": 500}),
    # The tick's looks for jobs their cluster no longer serves (removed; its models, nodes or regions changed).
    ("queued_jobs_of_other_clusters", {"clusters": ["1xl4", "8xa100-40gb"], "limit": 500}),
    ("queued_jobs_unfit", {"cluster": "1xl4", "models": ["spot"], "flex_run_s": 600, "flex_alone": False,
                           "most_nodes": 2, "regions": ["us-east4"], "limit": 500}),
]


@pytest.mark.parametrize("name, params", HOT_QUERIES, ids=[name for name, _ in HOT_QUERIES])
def test_hot_query_reads_through_an_index(big_db, name, params):
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql("EXPLAIN " + big_db.queries[name], **params))
    assert "Seq Scan on jobs" not in plan and "Seq Scan on outbox" not in plan, plan


def test_the_ticks_tag_pass_reads_no_untagged_queued_job(big_db):
    """``queued_jobs_uncleared`` runs before every scaling pass: through jobs_queued_tagged (migration 0051) it
    reads the queued jobs that require tags alone; through jobs_queued_demand it read each of the 2,500 queued
    jobs' requests here (none requires a tag), and a queue of 100,000 every tick."""
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN (ANALYZE, TIMING OFF) " + big_db.queries["queued_jobs_uncleared"], cluster="4xa100-40gb",
            carried='{"us-west1": ["hipaa"]}', limit=500))
    assert "jobs_queued_tagged" in plan and rows_read(plan) == 0, plan


def test_the_ticks_gpu_count_pass_reads_no_queued_job_that_fits(big_db):
    """``queued_jobs_gpus_above`` runs before every scaling pass: through jobs_queued_gpus (migration 0068) it reads no
    row while every queued job fits its cluster's VMs (the 2,500 queued here hold 4 GPUs each); through
    jobs_queued_demand it read each of them, and a queue of 100,000 every tick."""
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN (ANALYZE, TIMING OFF) " + big_db.queries["queued_jobs_gpus_above"], cluster="4xa100-40gb",
            gpu_count=4, limit=500))
    assert "jobs_queued_gpus" in plan and rows_read(plan) == 0, plan


@pytest.mark.parametrize("name, params", [
    ("queued_jobs_of_other_clusters", {"clusters": ["1xl4", "4xa100-40gb", "8xa100-40gb"], "limit": 500}),
    ("queued_jobs_unfit", {"cluster": "1xl4", "models": ["spot", "standard"], "flex_run_s": 600, "flex_alone": False,
                           "most_nodes": 1, "regions": ["us-central1"], "limit": 500})], ids=["clusters", "unfit"])
def test_the_ticks_configuration_passes_read_no_queued_job_that_fits(big_db, name, params):
    """``queued_jobs_of_other_clusters`` and ``queued_jobs_unfit`` run before every scaling pass: through ranges on
    jobs_queued_gpus (migration 0068) and the indexes of migration 0069 they read no row while every queued job's
    cluster is configured and serves what it asks (the 5,000 queued here, 1xl4's); a filter on the cluster, model,
    nodes or regions read each of them, and a queue of 100,000 every tick."""
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN (ANALYZE, TIMING OFF) " + big_db.queries[name], **params))
        found = session.sql(big_db.queries[name], **params)
    assert rows_read(plan) == 0 and "Seq Scan on jobs" not in plan, plan
    assert found == [], found
    if name == "queued_jobs_of_other_clusters":  # 1xl4 (every queued job's here) left out: before the first, between
        with big_db.transaction() as session:  # two, after the last configured name, they are found
            for configured in (["4xa100-40gb"], ["0x", "8xa100-40gb"], ["0x"]):
                assert len(session.sql(big_db.queries[name], clusters=configured, limit=6000)) == 5000, configured


@pytest.mark.parametrize("priority, most", [(0, 0), (-1, 5)], ids=["one priority", "every one higher"])
def test_a_claim_reads_at_most_the_jobs_it_may_offer(big_db, priority, most):
    """``queued_jobs_outranking`` runs at every claim that would win: through jobs_queued_priority (migration 0053) it
    reads no row where the 5,000 queued jobs here are all of the claimed job's priority, and its limit's worth where
    all are of higher priority. Through jobs_queued_demand (priority first, then regions) it read and sorted every
    queued job of the highest priority above the claimed job's: 5,000 at each claim of a job of priority -1; with a
    filter on their regions, so did it through any index."""
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN (ANALYZE, TIMING OFF) " + big_db.queries["queued_jobs_outranking"], cluster="1xl4",
            priority=priority, vm='["vm-1"]', now=datetime.now(timezone.utc), limit=5))
    assert "jobs_queued_priority" in plan and "Sort" not in plan and rows_read(plan) == most, plan


@pytest.mark.parametrize("name, params", [("held_vms_of_cluster", {"cluster": "1xl4", "left_running": "x"}),
                                          ("vm_holds_job", {"vm_name": "vm-13", "left_running": "x"})])
def test_the_jobs_holding_vms_are_read_inline(big_db, name, params):
    """``vm_holders`` (migration 0045), the one definition of the jobs that hold a VM, is inlined where the scaling
    pass and the drain call it: their ``cluster`` or ``vm`` reaches the jobs indexes. Not inlined, Postgres would
    run the function whole for each call (every held job of every cluster) and filter its rows afterwards."""
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql("EXPLAIN " + big_db.queries[name], **params))
    assert "Function Scan on vm_holders" not in plan and "Index" in plan and "Seq Scan on jobs" not in plan, plan


def rows_read(plan: str) -> int:
    """The rows the plan's index scans returned and its filters removed: what a page cost."""
    return sum(int(n) for n in re.findall(r"Index Scan using \S+ on jobs .*?actual rows=(\d+)", plan)) + sum(
        int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan))


@pytest.mark.parametrize("scope, first", [({}, "job-40001"), ({"owner": "u"}, "job-40001"),
                                          ({"queue": "q1"}, "job-40005")],
                         ids=["admin", "a member's own", "a member's queue"])
def test_a_console_page_far_down_the_list_enters_the_index_at_its_keyset(big_db, scope, first):
    """The console's job list (``recent_jobs`` with a keyset, zen.console.pages.job_list): page 800 of 50
    starts where the page before ended, inside an index (an Index Cond on the keyset), so it reads about its
    51 rows (a twelfth of the jobs are q1's: 12 x 51), not the 40,000 above them: for an admin, and for each
    read of a member's (their own jobs, each of their queues'). EXPLAIN ANALYZE shows both."""
    params = _listing(before_at=NOW - timedelta(seconds=40_000), before_id="job-40000", limit=51, **scope)
    with big_db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + big_db.queries["recent_jobs"], **params))
        rows = session.sql(big_db.queries["recent_jobs"], **params)
    print(plan)
    # job_id COLLATE "C" (migration 0063) shows as "(job_id)::text"
    assert "ROW(submitted_at, (job_id)::text) <" in plan.split("Index Cond: ")[1].splitlines()[0], plan
    assert "Seq Scan on jobs" not in plan and "Sort" not in plan, plan
    assert rows[0]["job_id"] == first and len(rows) == 51
    assert rows_read(plan) <= 12 * 51, plan


def test_a_member_with_few_jobs_reads_a_page_not_the_whole_list(big_db):
    """A viewer owning 2 jobs and in a queue with none: "theirs or their queues'" filtered one scan of
    jobs_recent, which walked all 60,000 jobs for the first page, every 2 s while a tab was open. Each read
    now stops at its page."""
    from zen.store import repository

    with big_db.transaction() as session:
        session.sql("UPDATE jobs SET user_id = 'Rare@example.com' WHERE job_id IN ('job-59990', 'job-59991')")
    try:
        with big_db.transaction() as session:
            plans = ["\n".join(row["QUERY PLAN"] for row in session.sql(
                "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + big_db.queries["recent_jobs"], **_listing(limit=51, **scope)))
                for scope in ({"owner": "rare@example.com"}, {"queue": "q-quiet"}, {"queue": "q1"})]
            own = repository.recent_jobs(session, limit=51, viewer=("rare@example.com", ["q-quiet"]))
            merged = repository.recent_jobs(session, limit=51, viewer=("rare@example.com", ["q-quiet", "q1"]))
        for plan in plans:  # q1 holds a twelfth of the jobs: read from jobs_recent, 12 x 51 at most
            assert "Seq Scan on jobs" not in plan and rows_read(plan) <= (51 if "q1" not in plan else 12 * 51), plan
        assert [j.job_id for j in own] == ["job-59990", "job-59991"]
        assert [j.job_id for j in merged[:2]] == ["job-9", "job-21"]  # q1's newest (i % 3 == 0, i % 4 == 1)
        assert len(merged) == 51
        with big_db.transaction() as session:  # u owns every job, q1's too: each once, a page read per scope
            everything = repository.recent_jobs(session, limit=51, viewer=("u", ["q1"]))
        assert [j.job_id for j in everything[:3]] == ["job-1", "job-2", "job-3"] and len(everything) == 51
    finally:
        with big_db.transaction() as session:
            session.sql("UPDATE jobs SET user_id = 'u' WHERE job_id IN ('job-59990', 'job-59991')")


@pytest.fixture(scope="module")
def big_db_with_kept_stops(pg_server, template_db):
    """test_query_plans' database of 60,000 jobs, with 200 stops kept for ids no job has (typos, jobs never
    submitted): forget_early_stops keeps them 7 days."""
    gen = big_db.__wrapped__(pg_server, template_db)
    db = next(gen)
    with db.transaction() as session:
        session.sql("INSERT INTO early_stops (job_id, reason, principal, requested_at) "
                    "SELECT 'never-' || i, 'r', 'p', now() FROM generate_series(1, 200) AS i")
    with db.session() as session:
        session.execute("ANALYZE")
    yield db
    next(gen, None)


def test_the_ticks_early_stops_query_reads_jobs_through_an_index(big_db_with_kept_stops):
    """Kept stops of jobs or arrays: written `EXISTS (job_id = ...) OR EXISTS (array_id = ...)`, Postgres hashed
    both subplans over a sequential scan of all of jobs at every tick (~70-110 ms on 60k jobs); the UNION of
    a join on jobs' key and a semi-join on jobs_by_array reads indexes only."""
    db = big_db_with_kept_stops
    with db.transaction() as session:
        plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
            "EXPLAIN " + db.queries["early_stops_of_submitted_jobs"], limit=500))
    assert "Seq Scan on jobs" not in plan, plan



def test_a_label_few_jobs_carry_reads_those_jobs_not_the_whole_list(big_db):
    """`zen jobs list --label K=V` and the console's label filter (``recent_jobs``): through jobs_labels (migration
    0071) a label 3 of the 60,000 jobs carry, or none (a typo), reads those alone; through jobs_recent the page
    read every job (60,000 rows removed by the filter; 436 ms on a million jobs, every 2 s while a tab shows it)."""
    with big_db.transaction() as session:
        session.sql("""UPDATE jobs SET request = '{"labels": {"team": "rare"}}'
                       WHERE job_id IN ('job-5', 'job-30000', 'job-59999')""")
        session.execute("ANALYZE jobs")
    try:
        for labels, found in (('{"team": "rare"}', ["job-5", "job-30000", "job-59999"]), ('{"team": "typo"}', [])):
            with big_db.transaction() as session:
                plan = "\n".join(row["QUERY PLAN"] for row in session.sql(
                    "EXPLAIN (ANALYZE, TIMING OFF) " + big_db.queries["recent_jobs"], **_listing(labels=labels)))
                rows = session.sql(big_db.queries["recent_jobs"], **_listing(labels=labels))
            assert "jobs_labels" in plan and "Seq Scan on jobs" not in plan and rows_read(plan) == 0, plan
            assert [r["job_id"] for r in rows] == found
    finally:
        with big_db.transaction() as session:
            session.sql("UPDATE jobs SET request = '{}' WHERE job_id IN ('job-5', 'job-30000', 'job-59999')")
