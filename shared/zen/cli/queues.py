"""``zen queues`` and ``zen explain JOB``: what each queue holds, and why a job waits.

    zen queues [--json]        per queue and cluster: quota, admitted (borrowed) GPUs, pending,
                               queued, running jobs, recent usage (decayed GPU-hours), and whether
                               the caller may submit to it (--json: why not)
    zen explain JOB [--json]   why a job is PENDING (its queue's quota, jobs ahead of it) or QUEUED
                               but not running (its cluster's latest scaling decisions)
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from zen.cli.kit import CliError, Context, fail, no_job, print_table, shown
from zen.core.clearance import for_request
from zen.core.config import load_config
from zen.core.gang_ends import losing_node
from zen.core.lifecycle import stopping_reason
from zen.core.models import LOWEST_PRIORITY, Job, JobStatus
from zen.core.routing import next_route
from zen.core.silence import stop_left_s
from zen.jobs.placement import regions_cleared_now, required_now
from zen.jobs.stranding import stranded
from zen.jobs.authorization import may_submit

QUEUE_COLUMNS = ("queue", "cohort", "cluster", "quota_gpus", "admitted_gpus", "borrowed_gpus", "pending", "queued",
                 "running", "recent_gpu_hours", "you_may_submit", "note")


def register(sub, ctx: Context) -> None:
    queues = sub.add_parser("queues", help="queues: quota, admitted and borrowed GPUs, waiting and running jobs")
    queues.add_argument("--json", action="store_true", help="print JSON instead of a table")
    queues.set_defaults(func=lambda args: cmd_queues(args, ctx.database))


def cmd_queues(args, db: Callable[[], Any]) -> int:
    from zen.jobs.queueing import Queueing
    from zen.store.jobstore import PostgresJobTx

    config = load_config()
    if not config.queues:
        print("no queues are configured: every job is admitted at once (see docs/how-to/queues.md)", file=sys.stderr)
        if args.json:
            print("[]")  # a script parsing the output gets valid JSON
        return 0
    with db().transaction() as session:
        rows = Queueing(config).summary(PostgresJobTx(session))
    who, source = _caller(config)
    for row in rows:  # the queue's rules for the caller (zen.jobs.authorization), as a submission would meet them
        refused = may_submit(config, who, row["queue"], LOWEST_PRIORITY) if config.queue(row["queue"]) else (
            f"queue {row['queue']} is not in the configuration")  # membership, not the default priority (0 is
                                                                   # above a max_priority of -1)
        row["you_may_submit"] = "yes" if refused is None else "no"
        if args.json:
            row["why_not"] = refused
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, QUEUE_COLUMNS)
        print(f"you_may_submit: as {who} ({source}); `zen submit --queue NAME` picks one", file=sys.stderr)
    return 0


def _caller(config) -> tuple[str, str]:
    """Who ``zen submit`` would submit as (``zen.cli.identity``), else ``$USER`` (as with ZEN_AUTH=off)."""
    import getpass
    import os

    from zen.cli import identity

    try:
        found = identity.current(config)
    except CliError:  # a ZEN_ID_TOKEN that is no token: a read command answers for $USER (submit and stop refuse it)
        found = None
    if found is not None and found.email:
        return found.email, found.source
    return os.environ.get("USER") or getpass.getuser(), "$USER: no identity found"


def explain_job(job_id: str, as_json: bool, db) -> int:
    """``zen explain JOB``: the job's status and why it is there (``explain_line``)."""
    from zen.store import repository
    from zen.store.jobstore import PostgresJobTx

    config = load_config()
    with db.transaction() as session:
        job = repository.get_job(session, job_id)
        tasks = PostgresJobTx(session).array_tasks(job_id) if job is None else []
        if job is None and not tasks:
            return fail(no_job(session, job_id, "`zen jobs list`, `zen clusters`", what="job, array or cluster named"), 1)
        if job is None:
            return _explain_array(job_id, tasks, as_json, db,
                                  lambda task: explain_line(session, config, task, local_time))
        why = explain_line(session, config, job, local_time)
    if as_json:
        print(json.dumps({"job_id": job.job_id, "status": job.status.value, "queue": job.queue, "why": why}))
    else:
        print(f"{job.job_id}: {job.status.value} - {shown(why)}")
    return 0


def _clock(moment: datetime, zone: timezone | None, now: datetime | None) -> str:
    """``moment`` as a time of day in ``zone`` (None: this machine's), with its date unless it is ``now``'s day
    there: a decision of yesterday read as a time of today."""
    here, today = moment.astimezone(zone), (now or datetime.now(timezone.utc)).astimezone(zone)
    return f"{here:%H:%M:%S}" if here.date() == today.date() else f"{here:%Y-%m-%d %H:%M:%S}"


def local_time(moment: datetime, now: datetime | None = None) -> str:
    """A time in ``zen explain``'s line: this machine's local time, as ``zen jobs list`` and ``zen watch`` show
    (dated unless it is today's)."""
    return _clock(moment, None, now)


def utc_time(moment: datetime, now: datetime | None = None) -> str:
    """A time in the console's line: UTC, as its pages show times, and saying so (dated unless it is today's)."""
    return f"{_clock(moment, timezone.utc, now)} UTC"


def explain_line(session, config, job, at: Callable[[datetime], str] = utc_time) -> str:
    """Why ``job`` is where it is, in one line: what ``zen explain JOB`` prints after the status (its times
    local, ``at=local_time``), and what the console shows on the job's page (``zen.console``; in UTC)."""
    from zen.jobs.queueing import Queueing
    from zen.store import fleet, repository
    from zen.store.jobstore import PostgresJobTx

    if job.status is JobStatus.PENDING and job.hold:  # an array's max_parallel, a retry's backoff
        why = f"held: {job.hold}"
        if job.hold_until is not None:  # a retry's, written in UTC (zen.core.retries): shown as every time here
            why = re.sub(r"due \d\d:\d\d:\d\d( UTC)?$", f"due {at(job.hold_until)}", why)
    elif job.status is JobStatus.PENDING and job.queue and config.queues:
        why = "waiting for quota: " + Queueing(config).why_pending(PostgresJobTx(session), job)
    elif job.status is JobStatus.PENDING and not config.queues:  # left by queues since removed
        why = "no queues are configured: admitted at the next scale tick"
    elif job.status is JobStatus.PENDING and not job.queue:  # its hold lifted (zen.jobs.sweeps: queue_less)
        why = "submitted before queues were configured: admitted at the next scale tick"
    elif job.status is JobStatus.QUEUED and (stranded := _stranded(config, job)):
        why = f"admitted{f' by queue {job.queue}' if job.queue else ''}; no VM can take it: {stranded}"
    elif job.status is JobStatus.QUEUED:
        decisions = fleet.recent_decisions(session, job.cluster, 50)  # newest first
        if decisions and decisions[0]["action"] == "ERROR" and (ok := fleet.last_scaling_pass(session, job.cluster)) \
                and ok > decisions[0]["at"]:  # a pass worked since the failure it records (and decided nothing new)
            decisions = [d for d in decisions if d["action"] != "ERROR"]
        why = (f"admitted{f' by queue {job.queue}' if job.queue else ''}; waiting for a VM of {job.cluster} "
               f"in {', '.join(job.start_regions or job.regions)}")
        if job.nodes > 1:  # a gang assembling (zen.core.gang)
            why += _gang_wait(job, at)
        elif job.start_vms and job.widen_at:  # zen.core.routing: offered to warm VMs, or ahead of lower priorities
            whose = "whose caches are warm" if job.start_regions else "ahead of the lower-priority job it claimed"
            why += f" (its start is offered to {', '.join(job.start_vms)} first, {whose}; widened " \
                   f"at the first tick after {at(job.widen_at)})"
        elif job.start_regions and job.widen_at:  # where the tick widens it to (zen.core.routing.next_route)
            later = next_route(config, job, job.widen_at).start_regions
            why += f" (its start goes there first; to {'every allowed region' if later is None else ', '.join(later)} " \
                   f"at the first tick after {at(job.widen_at)})"
        if job.start_published_at is not None:  # a start no VM takes (lost with a restarted stand-in, expired)
            again = job.start_published_at + timedelta(seconds=config.deadlines.start_republish_s)
            why += (f"; its start was published at {at(job.start_published_at)}, and is published again at the "
                    f"first tick after {at(again)} if no VM has claimed it (start_republish_s)")
        if decisions:
            last = decisions[0]
            why += (f"; the cluster's latest scaling decision ({at(last['at'])}): "
                    f"{' '.join(filter(None, (last['action'], last['region'], last['reason'])))}")
        latest = {d["region"]: d for d in reversed(decisions)}  # each pool's newest decision (its key: region)
        pools = _pools(config, job)
        held = [d["reason"].split("; blocked")[0] for pool, d in latest.items() if pool in pools
                and d["action"] == "BLOCK" and d["reason"].startswith("GPU quota") and d is not decisions[0]]
        why += "".join(f"; {text}" for text in held)  # a quota, not capacity (docs/how-to/deploy.md#gpu-quotas)
    elif job.status.terminal:  # one line: the change that ended it (its message holds the output's tail)
        # Not a note written after it (a stop that crossed the submission, refused by the tick: "... is not applied").
        ends = [row for row in repository.job_history(session, job.job_id)
                if row["to_status"] == job.status.value and row["from_status"] != row["to_status"]]
        last = ends[-1]["reason"].splitlines()[0] if ends else job.status.value
        if job.exit_code is not None and f"exit code {job.exit_code}" not in last:
            last += f" (exit code {job.exit_code})"
        ran = job.attempt > 1 or job.started_at is not None or job.vm is not None  # as `zen logs` tells (cli.follow)
        why = f"ended: {last}; " + (f"its output: `zen logs {job.job_id}`" if ran else "it never ran: no output")
    elif job.gang:  # a gang's nodes: how many are up, and where
        up = [n.vm for n in job.gang if n.status in ("CLAIMED", "RUNNING")]
        why = f"{job.status.value.lower()}: {len(up)} of {job.nodes} nodes up in {job.region} ({', '.join(up)})"
    else:
        why = f"on VM {job.vm} in {job.region}" if job.vm else job.status.value
    if job.status is JobStatus.STOPPING:  # why, and until when its VM may answer (silence.stop_left_s)
        since, losing = job.last_heartbeat_at, losing_node(job)
        wait_s = None if since is None else stop_left_s(job, since, config.deadlines, losing)
        why += f"; stopping: {_stopping_why(session, job, losing)}" + ("" if since is None or wait_s is None else
                                                                      f"; unanswered by {at(since + timedelta(seconds=wait_s))}, "
                                                                      f"{_unanswered(job, losing)}")
    data = _data_line(config, job)
    if data:
        why += f"; {data}"
    cleared = for_request(config.data_clearance, job.request)  # why a job that asked for no tags waits for some
    if cleared is not None and not job.status.terminal:
        why += f"; {cleared.because()}"
    return why


def _stopping_why(session, job, losing: bool) -> str:
    """Why a STOPPING job stops: its user's reason or its queue's preemption (``lifecycle.stopping_reason``); a gang's
    lost or failed node (``gang_ends.losing_node``: neither), as its history's last change to STOPPING says."""
    if not losing:
        return stopping_reason(job)
    from zen.store import repository

    stops = [row["reason"] for row in repository.job_history(session, job.job_id)  # the change into it, not a note
             if row["to_status"] == "STOPPING" and row["from_status"] != "STOPPING"]  # since (a part given back)
    return stops[-1].splitlines()[0] if stops else "a node of the gang was lost"


def _unanswered(job, losing: bool) -> str:
    """What the sweep does with a STOPPING job its VMs leave unanswered (``silence.decide_silence``): a user's stop
    ends the job (CANCELLED); a preemption by its queue gives the attempt up and the job waits for its quota again, no
    attempt spent; a gang that lost a node gives the attempt up and runs again, or ends FAILED
    (``gang_ends.settle``)."""
    word = "their" if job.nodes > 1 else "its VM's"
    if job.preempted_by:
        return f"the attempt is given up without {word} word and the job waits for its queue's quota again (no attempt spent)"
    if losing:
        return (f"the attempt is given up without {word} word: the gang runs again, or ends FAILED where a node failed "
                "or its attempts are spent")
    return f"it is ended without {word} word"


def _pools(config, job) -> tuple[str, ...]:
    """The pools a queued job may start in, keyed as its cluster's decisions are (``zen.core.provisioning``):
    its regions x the models it accepts, as the planner counts its demand (``zen.scaling.fleetdb``)."""
    from zen.scaling.fleetdb import pools_of_row

    row = {"regions": job.regions, "provisioning": job.request.get("provisioning"),
           "longest": job.request.get("max_runtime_s")}
    return pools_of_row(row, config.cluster(job.cluster))[0]


def _stranded(config, job) -> str | None:
    """Why no VM of the configuration can take a queued job, which it accepted when it was submitted (the
    configuration changed since: its cluster, the models or regions it allows went; ``zen.jobs.stranding``), or None.
    Such a job is not failed: it waits until the configuration serves it again, as a job whose queue went does; the
    scale tick holds it PENDING, the same reason its hold, before its next scaling pass."""
    after = "the job waits until the configuration has it again, or stop it and submit it again"
    if (why := stranded(config, job)) is not None:
        return f"{why}: {after}"
    cluster = config.cluster(job.cluster)
    if not set(job.regions) & set(cluster.regions):  # (named none: the tick widens it to the cluster's now)
        return (f"cluster {cluster.name} no longer runs in {', '.join(job.regions)}, the regions the job allows "
                f"(the cluster's: {', '.join(cluster.regions)}): {after}")
    if not regions_cleared_now(config, job):  # a tag it requires (or its data needs) left every region of its
        return (f"no region of cluster {cluster.name} it allows carries the tags {required_now(config, job)} it requires "
                f"now (the configuration changed): {after}")
    return None


def _explain_array(array_id: str, tasks: list, as_json: bool, db, why: Callable[[Job], str]) -> int:
    """``zen explain ARRAY``: its progress, then why its first task not yet running waits (``why``: its
    ``explain_line``; the JSON's ``why`` too, where the table shows it), unless max_parallel holds it: the
    progress line says that (a dependency's hold or a retry's backoff is the task's own line)."""
    from zen.cli.records import array_progress, parallel_hold

    progress = array_progress(array_id, tasks)
    waiting = next((t for t in tasks if t.status in (JobStatus.PENDING, JobStatus.QUEUED)), None)
    held = next((t.hold for t in tasks if parallel_hold(t)), None)  # the tasks max_parallel holds: the rest's wait
    if as_json:
        print(json.dumps({"array_id": array_id, "progress": progress, "held": held,
                          "next": waiting.job_id if waiting else None,
                          "next_status": waiting.status.value if waiting else None,  # and its line, as the table's
                          "why": why(waiting) if waiting is not None and not parallel_hold(waiting) else None}))
        return 0
    print(progress + (f"; the rest wait because the {held}" if held else ""))
    if waiting is not None and not parallel_hold(waiting):  # its --after, its retry's backoff: its own line says
        return explain_job(waiting.job_id, False, db)
    return 0


def _data_line(config, job) -> str | None:
    """Where its inputs are and what reading them costs from its region (or its first choice)."""
    from zen.core.locality import egress_usd
    from zen.core.models import InputSpec

    inputs = [InputSpec.model_validate(spec) for spec in job.request.get("inputs") or ()]
    region = job.region or (job.regions[0] if job.regions else None)
    priced = egress_usd(config, region, inputs) if region else None
    if priced is None:
        return None
    crossing, usd, unknown = priced
    copies = job.nodes  # every node of a gang stages every input (zen.agent.attempt)
    parts = [f"regions ordered by input location ({', '.join(job.regions)}); from {region} {crossing * copies:g} GB "
             f"of input cross regions, about ${usd * copies:.2f} egress"
             + (f" ({copies} nodes, each reads all of it)" if copies > 1 else "")] if unknown < sum(
        i.size_gb if i.size_gb is not None else 1.0 for i in inputs) else []
    return "data: " + "; ".join(parts + ([f"{unknown * copies:g} GB in buckets of unknown location, not priced"]
                                         if unknown else []))


def _gang_wait(job: Job, at: Callable[[datetime], str]) -> str:
    """How a QUEUED gang waits: its nodes claimed so far and its deadline, or where its start goes first."""
    claimed = job.gang or []
    if claimed and job.widen_at:
        return (f" (a gang of {job.nodes}: {len(claimed)} claimed in {claimed[0].region} "
                f"({', '.join(n.vm for n in claimed)}), the rest until {at(job.widen_at)}, then released and "
                "retried; sooner if a stockout blocks its region or its limits leave no room for the rest)")
    if job.start_regions and job.widen_at:  # zen.core.gang.avoid_region
        return (f" (a gang of {job.nodes}: none claimed yet; sent there first, away from the region its last "
                f"attempt could not assemble in; every allowed region at the first tick after {at(job.widen_at)})")
    return f" (a gang of {job.nodes}: none claimed yet)"
