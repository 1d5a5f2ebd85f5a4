"""The ``zen`` command.

    zen db migrate                         apply schema migrations (idempotent)
    zen jobs list [--status S] [--cluster C] [--json]
    zen jobs get ID [--json]
    zen jobs history ID [--json]
    zen rejected [--json]                  messages Zen refused, with the reason
    zen explain [CLUSTER] [--json]         recent scaling decisions and their reasons
    zen local pubsub --port N              the Pub/Sub stand-in (gRPC)
    zen local compute --port N --scenario FILE   the Compute stand-in (REST)
    zen local bridge --route TOPIC=URL [--tick-every S]   Eventarc-style delivery to functions
    zen local up [--scenario F] [--time-scale X] / zen local down    the whole system on this machine
    zen submit [FILE] [--cluster C ...] [-- CMD ARGS]   publish a job;  zen stop ID [--reason R]
    zen watch                              live table of jobs and VMs per region
    zen simulate --scenario NAME [--json] [--out DIR]   the planner against baselines on traces
    zen demo [--scripted]                  the whole system on this machine (or just the lifecycle)

The database is ``ZEN_DATABASE_URL`` (or Cloud SQL, or the embedded Postgres under ``.zen/``; see
``zen.store.db``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from zen.models import JobStatus


def _db():
    from zen.store.db import Database

    return Database.from_env()


def _print_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    text = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in text]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in text:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


JOB_COLUMNS = ("job_id", "status", "attempt", "cluster", "region", "vm", "submitted_at", "started_at",
               "finished_at", "exit_code")


def _short_times(view: dict[str, Any]) -> dict[str, Any]:
    out = dict(view)
    for key in ("submitted_at", "started_at", "finished_at"):
        if out.get(key):
            out[key] = out[key][11:19]  # HH:MM:SS, enough for a terminal table
    return out


def cmd_db_migrate(args) -> int:
    from zen.store.migrate import migrate

    applied = migrate(_db())
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_jobs_list(args) -> int:
    from zen.store import repository

    with _db().transaction() as session:
        jobs = repository.list_jobs(session, status=args.status, cluster=args.cluster, limit=args.limit)
    views = [j.public_view() for j in jobs]
    if args.json:
        print(json.dumps(views, indent=2))
    else:
        _print_table([_short_times(v) for v in views], JOB_COLUMNS)
    return 0


def cmd_jobs_get(args) -> int:
    from zen.store import repository

    with _db().transaction() as session:
        job = repository.get_job(session, args.job_id)
    if job is None:
        print(f"no job {args.job_id}", file=sys.stderr)
        return 1
    view = job.public_view()
    if args.json:
        print(json.dumps(view, indent=2))
    else:
        for key, value in view.items():
            print(f"{key:>13}: {'' if value is None else value}")
    return 0


def cmd_jobs_history(args) -> int:
    from zen.store import repository

    with _db().transaction() as session:
        if repository.get_job(session, args.job_id) is None:
            print(f"no job {args.job_id}", file=sys.stderr)
            return 1
        rows = repository.job_history(session, args.job_id)
    for row in rows:
        row["at"] = row["at"].isoformat()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ("at", "attempt", "from_status", "to_status", "actor", "reason"))
    return 0


def cmd_rejected(args) -> int:
    from zen.store import repository

    with _db().transaction() as session:
        rows = repository.list_rejections(session)
    for row in rows:
        row["at"] = row["at"].isoformat()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ("at", "source", "message_id", "job_id", "reason"))
    return 0


def cmd_explain(args) -> int:
    from zen.store import fleet

    with _db().transaction() as session:
        rows = fleet.recent_decisions(session, args.cluster, args.limit)
    rows.reverse()  # oldest first, like a log
    for row in rows:
        row["at"] = row["at"].isoformat()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ("at", "cluster", "region", "action", "count", "vm", "reason"))
    return 0


def cmd_agent(args, rest: list[str]) -> int:
    from zen.agent.__main__ import main as agent_main

    return agent_main(rest) or 0


def cmd_simulate(args, rest: list[str]) -> int:
    from zen.sim.cli import main as simulate_main

    return simulate_main(rest) or 0


def cmd_local(args, rest: list[str]) -> int:
    from zen import usercli

    if args.component == "up":
        return usercli.cmd_local_up(rest)
    if args.component == "down":
        return usercli.cmd_local_down(rest)
    if args.component == "pubsub":
        from zen.local.pubsub import main as pubsub_main

        return pubsub_main(rest) or 0
    if args.component == "bridge":
        from zen.local.bridge import main as bridge_main

        return bridge_main(rest) or 0
    from zen.local.compute import main as compute_main

    return compute_main(rest) or 0


def cmd_demo(args) -> int:
    if args.scripted:
        from zen.demo import main as scripted_main

        return scripted_main()
    from zen.local.demo import main as demo_main

    return demo_main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zen", description="Zen: multi-region GPU job scheduler")
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="database administration").add_subparsers(dest="db_command", required=True)
    db.add_parser("migrate", help="apply schema migrations").set_defaults(func=cmd_db_migrate)

    jobs = sub.add_parser("jobs", help="inspect jobs").add_subparsers(dest="jobs_command", required=True)
    listing = jobs.add_parser("list", help="list jobs")
    listing.add_argument("--status", choices=[s.value for s in JobStatus])
    listing.add_argument("--cluster")
    listing.add_argument("--limit", type=int, default=1000)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(func=cmd_jobs_list)
    get = jobs.add_parser("get", help="one job")
    get.add_argument("job_id")
    get.add_argument("--json", action="store_true")
    get.set_defaults(func=cmd_jobs_get)
    hist = jobs.add_parser("history", help="a job's status changes")
    hist.add_argument("job_id")
    hist.add_argument("--json", action="store_true")
    hist.set_defaults(func=cmd_jobs_history)

    rejected = sub.add_parser("rejected", help="messages Zen refused, and why")
    rejected.add_argument("--json", action="store_true")
    rejected.set_defaults(func=cmd_rejected)

    explain = sub.add_parser("explain", help="recent scaling decisions and why")
    explain.add_argument("cluster", nargs="?")
    explain.add_argument("--limit", type=int, default=50)
    explain.add_argument("--json", action="store_true")
    explain.set_defaults(func=cmd_explain)

    local = sub.add_parser("local", add_help=False, help="local stand-ins for Google Cloud (arguments pass through)")
    local.add_argument("component", choices=["up", "down", "pubsub", "compute", "bridge"])
    local.set_defaults(func=cmd_local, passthrough=True)

    agent = sub.add_parser("agent", add_help=False, help="the VM agent: pull, claim, run, heartbeat")
    agent.set_defaults(func=cmd_agent, passthrough=True)

    simulate = sub.add_parser("simulate", add_help=False, help="replay traces against the planner and baselines")
    simulate.set_defaults(func=cmd_simulate, passthrough=True)

    from zen import usercli

    usercli.add_parsers(sub)
    __import__("zen.statscli").statscli.add_parsers(sub)  # zen stats (shared/zen/statscli.py)
    demo = sub.add_parser("demo", help="the whole system on this machine, a scripted scenario, a summary")
    demo.add_argument("--scripted", action="store_true",
                      help="only the in-process lifecycle through the functions (seconds, no stand-ins)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Inside a local stack's directory, talk to that stack unless told otherwise.
    from zen.local.stack import stack_env

    for key, value in stack_env().items():
        os.environ.setdefault(key, value)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    trailing: list[str] = []
    if "--" in argv and argv[0] in ("submit",):
        # `zen submit [FILE] [flags] -- PROGRAM ARGS`: everything after -- is the job's command.
        cut = argv.index("--")
        argv, trailing = argv[:cut], argv[cut + 1:]
    args, rest = parser.parse_known_args(argv)
    args.trailing = trailing
    if getattr(args, "passthrough", False):
        return args.func(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
