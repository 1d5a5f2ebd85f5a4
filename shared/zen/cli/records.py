"""``zen db migrate``, ``zen jobs list|get|history`` and ``zen rejected``: the schema, and what the
database holds about jobs and refused messages (docs/reference/cli.md)."""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys

from zen.cli.kit import JOB_COLUMNS, Context, fail, job_row, no_job, print_table, row_id, shown
from zen.core.gcs import NOT_WHOLE, OUTPUTS_MANIFEST, WHOLE, output_destination
from zen.core.models import JobStatus


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def cmd_db_migrate(args, ctx: Context) -> int:
    from zen.store.migrate import migrate

    applied = migrate(ctx.database())
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_jobs_list(args, ctx: Context) -> int:
    from zen.store import repository

    with ctx.database().transaction() as session:
        jobs = repository.recent_jobs(session, status=args.status, cluster=args.cluster, user_id=args.user,
                                      labels=dict(args.label or []), since=args.since, limit=args.limit + 1,
                                      queue=args.queue, array_id=args.array)
        tasks = ctx_array_tasks(session, args.array) if args.array else None
    if more := len(jobs) > args.limit:  # a script counting jobs must not take the page for all of them
        jobs = jobs[:args.limit]
    if tasks is not None:  # the whole array's progress, whatever the filters and the limit show
        print(array_progress(args.array, tasks), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps([j.public_view() for j in jobs], indent=2))
    else:
        print_table([job_row(j) for j in jobs], JOB_COLUMNS)
    if more:
        print(f"more: more than {args.limit} jobs match, the newest shown; see more with --limit {args.limit * 4}",
              file=sys.stderr)
    if not jobs and args.cluster:  # a typo listed nothing, silently (a cluster removed keeps its jobs: not refused)
        from zen.core.config import load_config
        from zen.core.errors import ConfigError

        try:
            config = load_config()
        except (ConfigError, ValueError):  # no note then: the listing needs no configuration
            return 0
        if config.cluster(args.cluster) is None:
            print(f"note: no cluster {args.cluster!r} in the configuration (its clusters: "
                  f"{', '.join(c.name for c in config.clusters)})", file=sys.stderr)
    return 0


def ctx_array_tasks(session, array_id: str) -> list:
    from zen.store.jobstore import PostgresJobTx

    return PostgresJobTx(session).array_tasks(array_id)


def parallel_hold(job) -> bool:
    """A task waiting for its array's ``max_parallel`` to let it go."""
    from zen.core.arrays import HOLD_PREFIX

    return job.status.value == "PENDING" and bool(job.hold) and job.hold.startswith(HOLD_PREFIX)


def array_progress(array_id: str, tasks: list) -> str:
    """``array sweep: 6 tasks: 2 succeeded, 1 failed, 1 running, 2 waiting (1 held by max_parallel)``."""
    if not tasks:
        return f"array {array_id}: no tasks (no array has that id)"
    counts: dict[str, int] = {}
    for job in tasks:
        word = {"QUEUED": "waiting", "PENDING": "waiting", "ASSIGNED": "running", "STOPPING": "running",
                "LOST": "waiting"}.get(job.status.value, job.status.value.lower())
        counts[word] = counts.get(word, 0) + 1
    held = sum(1 for job in tasks if parallel_hold(job))  # not a retry's backoff, a dependency, an ended task's
    order = ("succeeded", "failed", "cancelled", "running", "waiting")
    parts = [f"{counts[w]} {w}" + (f" ({held} held by max_parallel)" if w == "waiting" and held else "")
             for w in order if counts.get(w)]
    return f"array {array_id}: {len(tasks)} tasks: {', '.join(parts)}"


def cmd_jobs_get(args, ctx: Context) -> int:
    from zen.store import repository

    with ctx.database().transaction() as session:
        job = repository.get_job(session, args.job_id)
        if job is None:
            return fail(no_job(session, args.job_id, "`zen jobs list` lists them"), 1)
    view = {**job.public_view(), **_what_it_runs(job), **_gang_view(job, args.json), **_outputs_view(job)}
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    message = view.pop("message") or ""
    for key, value in view.items():
        if value not in (None, [], {}) and not (key == "retries" and value == 0):
            print(f"{key:>16}: {shown(value)}")
    lines = [shown(line, keep="\t") for line in message.rstrip("\n").splitlines()]
    if lines:  # its final report: Zen's word first, then the output's tail (the whole output: zen logs)
        tail = lines[-MESSAGE_LINES:]
        print(f"{'message':>16}: {tail[0]}")
        for line in tail[1:]:
            print(f"{'':>16}  {line}")
        if len(lines) > len(tail):
            print(f"{'':>16}  ({len(lines) - len(tail)} earlier line(s); the whole output: zen logs {job.job_id})")
    return 0


MESSAGE_LINES = 8  # of a job's final report shown by `zen jobs get` (--json: all of it)


def _what_it_runs(job) -> dict:
    """What the job runs and where it waits, from its request: queue, image, command, labels, the names of
    its env and secrets (never their values), the tags it needs."""
    request = job.request
    command = request.get("command") or []
    return {"queue": job.queue, "image": request.get("image"),
            "command": " ".join(shlex.quote(str(part)) for part in command) if command else None,
            "labels": request.get("labels") or None, "env_keys": sorted(request.get("env") or {}) or None,
            "secrets": sorted(request.get("secrets") or {}) or None, "requires_tags": request.get("requires_tags")}


def _outputs_view(job) -> dict:
    """Where the attempt's outputs are in Cloud Storage and whether whole (``outputs_whereabouts``, below):
    the final report says so before the output's tail, which `zen jobs get` shows."""
    outputs = job.request.get("outputs")
    if not outputs or not job.attempt:
        return {}
    return {"outputs": outputs_whereabouts(outputs, job.job_id, job.attempt, job.nodes, job.status.terminal, job.message)}


def _gang_view(job, as_json: bool) -> dict:
    """A gang's nodes (``zen.core.gang``): how many of the N are up and where, and each node's rank, VM, zone,
    address, last status and exit code. Nothing for a job of one VM."""
    if job.nodes == 1:
        return {}
    nodes = job.gang or []
    up = [n for n in nodes if n.status in ("CLAIMED", "RUNNING")]
    where = f" in {nodes[0].region}" if nodes else ""
    waiting = f", waiting for the rest until {job.widen_at.isoformat()}" if job.status.value == "QUEUED" and nodes \
        and job.widen_at else ""
    summary = f"{len(up)} of {job.nodes} up{where}{waiting}"
    if as_json:
        return {"nodes": job.nodes, "nodes_up": summary, "gang": [n.model_dump(mode="json") for n in nodes]}
    lines = {f"rank {n.rank}": f"{n.vm} {n.zone} {n.ip or '-'} {n.status}" + (
        f" (exit code {n.exit_code})" if n.exit_code is not None else "") for n in nodes}
    return {"nodes": f"{job.nodes}: {summary}", **lines}


def cmd_jobs_history(args, ctx: Context) -> int:
    from zen.store import repository

    with ctx.database().transaction() as session:
        if repository.get_job(session, args.job_id) is None:
            return fail(no_job(session, args.job_id, "`zen jobs list` lists them"), 1)
        rows = repository.job_history(session, args.job_id)
    for row in rows:
        row["at"] = row["at"].isoformat()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ("at", "attempt", "from_status", "to_status", "actor", "reason"))
    return 0


def cmd_rejected(args, ctx: Context) -> int:
    """One page of refused messages, newest first (``zen.store.rejections``); payloads only with --json."""
    from zen.store import rejections

    with ctx.database().transaction() as session:
        rows = rejections.page(session, limit=args.limit + 1, before=args.before, payloads=args.json, job_id=args.job)
    older, rows = len(rows) > args.limit, rows[:args.limit]  # one more read: an "older" page only where one is
    for row in rows:
        row["at"] = row["at"].isoformat()
        row["last_at"] = row["last_at"].isoformat() if row["last_at"] else None
        if not args.json:
            row.pop("payload")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ("at", "id", "count", "last_at", "source", "message_id", "job_id", "named_job_id",
                           "principal", "reason"))
    if older:
        print(f"older: zen rejected{f' --job {args.job}' if args.job else ''} --before {rows[-1]['id']}", file=sys.stderr)
    return 0


def register(sub, ctx: Context) -> None:
    db = sub.add_parser("db", help="database administration").add_subparsers(dest="db_command", required=True)
    db.add_parser("migrate", help="apply schema migrations (ZEN_DATABASE_URL or ZEN_CLOUDSQL_INSTANCE)"
                  ).set_defaults(func=lambda args: cmd_db_migrate(args, ctx))

    jobs = sub.add_parser("jobs", help="inspect jobs").add_subparsers(dest="jobs_command", required=True)
    listing = jobs.add_parser("list", help="jobs, newest first")
    listing.add_argument("--user", help="only this user's jobs (user_id)")
    listing.add_argument("--status", type=str.upper, choices=[s.value for s in JobStatus],
                         help="only jobs in this status (any case)")
    listing.add_argument("--cluster", help="only jobs of this cluster")
    listing.add_argument("--queue", help="only jobs of this queue")
    listing.add_argument("--array", metavar="ARRAY_ID", help="only the tasks of this array, with its progress")
    listing.add_argument("--label", action="append", type=_label, metavar="KEY=VALUE",
                         help="only jobs carrying this label (repeatable: all must match)")
    listing.add_argument("--since", type=ctx.since, metavar="AGE|DATE",
                         help="only jobs submitted since: an age (30m, 2h, 7d) or a date (2026-11-20)")
    listing.add_argument("--limit", type=ctx.positive, default=50,
                         help="at most this many, newest first (default 50)")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(func=lambda args: cmd_jobs_list(args, ctx))
    get = jobs.add_parser("get", help="one job")
    get.add_argument("job_id", help="the job's id (printed by zen submit)")
    get.add_argument("--json", action="store_true", help="print a JSON object")
    get.set_defaults(func=lambda args: cmd_jobs_get(args, ctx))
    hist = jobs.add_parser("history", help="a job's status changes, and why")
    hist.add_argument("job_id", help="the job's id")
    hist.add_argument("--json", action="store_true", help="print a JSON array")
    hist.set_defaults(func=lambda args: cmd_jobs_history(args, ctx))
    for group in (db, jobs):  # "required: {list,get,history}", not the parser's own name for it (jobs_command)
        group.metavar = "{" + ",".join(group.choices) + "}"

    rejected = sub.add_parser("rejected", help="messages Zen refused, and why (newest first, a page at a time)")
    rejected.add_argument("--limit", type=ctx.positive, default=50, help="rows in the page (default 50)")
    rejected.add_argument("--before", type=row_id, metavar="ID", help="the page of rows older than row ID")
    rejected.add_argument("--job", metavar="JOB_ID", help="only the messages naming this job id (its job's, "
                          "job_id, or sent by someone not shown to be its owner, named_job_id)")
    rejected.add_argument("--json", action="store_true", help="print a JSON array (with each message's payload)")
    rejected.set_defaults(func=lambda args: cmd_rejected(args, ctx))


def outputs_whereabouts(outputs: str, job_id: str, attempt: int, nodes: int, ended: bool, message: str | None) -> str:
    """Where an attempt's outputs go and whether they are whole, for ``zen jobs get``: an ended job's from its final
    report's Zen lines before the output's tail (``zen: ... uploaded ... to <prefix> (...: whole)``), else what says
    so in the bucket. The first line saying either decides: the agent's come before the tail, whose first lines
    the job printed (one echoing Zen's line that its outputs are whole is not the agent's)."""
    where = output_destination(outputs, job_id, attempt) + ("node-<rank>/ (each node's)" if nodes > 1 else "")
    if ended and nodes == 1:
        for line in itertools.takewhile(lambda line: line.startswith("zen"), (message or "").splitlines()):
            if f" to {where} {WHOLE}" in line:
                return f"{where} (whole: {OUTPUTS_MANIFEST} written last)"
            if f" to {where} {NOT_WHOLE}" in line:
                return f"{where} (NOT whole: the upload failed or was cut; no {OUTPUTS_MANIFEST})"
    return f"{where} (whole once it holds {OUTPUTS_MANIFEST}, written last)"
