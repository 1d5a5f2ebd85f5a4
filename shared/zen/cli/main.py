"""The ``zen`` command.

    zen db migrate                         apply schema migrations (idempotent)
    zen jobs list [--user U] [--status S] [--cluster C] [--label K=V] [--since 2h] [--limit N] [--json]
    zen jobs get ID [--json]
    zen jobs history ID [--json]
    zen rejected [--limit N] [--before ID] [--json]   messages Zen refused, with the reason, newest first
    zen explain [CLUSTER] [--json]         recent scaling decisions and their reasons
    zen clusters [--json]                  the GPU shapes, regions and limits a job may ask for
    zen explain JOB [--json]               why a job waits (queue quota, jobs ahead) or is not running yet
    zen queues [--json]                    per queue: quota, admitted/borrowed GPUs, pending, running
    zen usage [--since 7d] [--by user|queue|region] [--json]   GPU-hours, VM-hours, estimated cost
    zen local pubsub --port N              the Pub/Sub stand-in (gRPC)
    zen local compute --port N --scenario FILE   the Compute stand-in (REST)
    zen local bridge --route TOPIC=URL [--tick-every S]   Eventarc-style delivery to functions
    zen local up [--scenario F] [--time-scale X] / zen local down    the whole system on this machine
    zen submit [FILE] [--cluster C ...] [-- CMD ARGS]   publish a job;  zen stop ID [--reason R]
    zen submit --wait ...                  the same, then follow it to its end (its output, its exit code)
    zen logs JOB [--attempt N] [-f]        a job's output (stdout and stderr, every attempt)
    zen watch                              live table of jobs and VMs per region
    zen simulate --scenario NAME [--json] [--out DIR]   the planner against baselines on traces
    zen demo [--scripted]                  the whole system on this machine (or just the lifecycle)

The database is the running local stack's (``.zen/stack.json`` in this directory), ``ZEN_DATABASE_URL``,
or Cloud SQL (``ZEN_CLOUDSQL_INSTANCE``); no command starts or creates one (``zen.cli.kit``). Errors are
one line on stderr, exit 2 for usage and 1 for failures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import Sequence

from zen.cli.kit import JOB_COLUMNS, CliError, job_row, print_table, run
from zen.core.models import JobStatus


def _db():
    from zen.cli.kit import database

    return database()


def _since(text: str) -> datetime:
    """``--since``: an age (90s, 30m, 2h, 7d) or an ISO date/time (2026-11-20, 2026-11-20T08:00)."""
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if match:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return datetime.now(timezone.utc) - timedelta(seconds=int(match.group(1)) * unit)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither an age (30m, 2h, 7d) nor a date (2026-11-20)") from None
    return moment if moment.tzinfo else moment.astimezone()


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def cmd_db_migrate(args) -> int:
    from zen.store.migrate import migrate

    applied = migrate(_db())
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_jobs_list(args) -> int:
    from zen.store import repository

    with _db().transaction() as session:
        jobs = repository.recent_jobs(session, status=args.status, cluster=args.cluster, user_id=args.user,
                                      labels=dict(args.label or []), since=args.since, limit=args.limit)
    if args.json:
        print(json.dumps([j.public_view() for j in jobs], indent=2))
    else:
        print_table([job_row(j) for j in jobs], JOB_COLUMNS)
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
        print_table(rows, ("at", "attempt", "from_status", "to_status", "actor", "reason"))
    return 0


def cmd_rejected(args) -> int:
    """One page of refused messages, newest first (``zen.store.rejections``); payloads only with --json."""
    from zen.store import rejections

    with _db().transaction() as session:
        rows = rejections.page(session, limit=args.limit, before=args.before, payloads=args.json)
    for row in rows:
        row["at"] = row["at"].isoformat()
        row["last_at"] = row["last_at"].isoformat() if row["last_at"] else None
        if not args.json:
            row.pop("payload")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ("at", "id", "count", "last_at", "source", "message_id", "job_id", "reason"))
    if len(rows) == args.limit:
        print(f"older: zen rejected --before {rows[-1]['id']}", file=sys.stderr)
    return 0


def cmd_explain(args) -> int:
    from zen.core.config import load_config
    from zen.store import fleet

    if args.cluster and load_config().cluster(args.cluster) is None:  # not a cluster: a job
        from zen.cli.queues import explain_job

        return explain_job(args.cluster, args.json, _db())
    with _db().transaction() as session:
        rows = fleet.recent_decisions(session, args.cluster, args.limit)
    rows.reverse()  # oldest first, like a log
    for row in rows:
        row["at"] = row["at"].isoformat()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ("at", "cluster", "region", "action", "count", "vm", "reason"))
    return 0


def cmd_clusters(args) -> int:
    from zen.core.config import load_config

    config = load_config()
    rows = [{"cluster": c.name, "gpus": f"{c.gpu_count}x {c.gpu_type}", "machine": c.machine_type,
             "regions": ",".join(c.regions), "max_vms_per_region": c.max_vms_per_region, "max_vms": c.max_vms,
             "min_vms": c.min_vms, "jobs_per_vm": c.max_jobs_per_vm,
             "tags": "; ".join(f"{r}: {','.join(c.tags_of(r))}" for r in c.regions if c.tags_of(r))}
            for c in config.clusters]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print_table(rows, ("cluster", "gpus", "machine", "regions", "max_vms_per_region", "max_vms", "min_vms",
                       "jobs_per_vm", "tags"))
    print(f"\nAsk with --cluster NAME, or --gpu-type T --gpu-count N (the smallest fitting cluster); "
          f"--region narrows a cluster's regions. Limits: max_runtime_s {config.limits.max_runtime_s}, "
          f"max_attempts {config.attempts.max_max_attempts} (configuration: {os.environ.get('ZEN_CONFIG') or 'default'}).")
    return 0


def _local_only(what: str) -> CliError:
    return CliError(f"`zen {what}` needs the development checkout (its local stand-ins are not in the deployable "
                    "wheel): run it from the repository after `make venv`")


def cmd_agent(args, rest: list[str]) -> int:
    from zen.agent.__main__ import main as agent_main

    return agent_main(rest) or 0


def cmd_simulate(args, rest: list[str]) -> int:
    try:
        from zen_dev.sim.cli import main as simulate_main
    except ImportError:
        raise _local_only("simulate") from None
    return simulate_main(rest) or 0


LOCAL_COMPONENTS = ("up", "down", "pubsub", "compute", "bridge")


def cmd_local(args, rest: list[str]) -> int:
    try:
        from zen_dev.local import stack  # noqa: F401 - only to learn whether the stand-ins are installed
    except ImportError:
        raise _local_only("local") from None
    from zen.cli import user as usercli

    if args.component == "up":
        return usercli.cmd_local_up(rest)
    if args.component == "down":
        return usercli.cmd_local_down(rest)
    if args.component == "pubsub":
        from zen_dev.local.pubsub import main as pubsub_main

        return pubsub_main(rest) or 0
    if args.component == "bridge":
        from zen_dev.local.bridge import main as bridge_main

        return bridge_main(rest) or 0
    from zen_dev.local.compute import main as compute_main

    return compute_main(rest) or 0


def cmd_demo(args) -> int:
    try:
        if args.scripted:
            from zen_dev.demo.scripted import main as scripted_main

            return scripted_main()
        from zen_dev.demo import main as demo_main
    except ImportError:
        raise _local_only("demo") from None
    return demo_main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zen", description="Zen: multi-region GPU job scheduler")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = sub.add_parser("db", help="database administration").add_subparsers(dest="db_command", required=True)
    db.add_parser("migrate", help="apply schema migrations (ZEN_DATABASE_URL or ZEN_CLOUDSQL_INSTANCE)"
                  ).set_defaults(func=cmd_db_migrate)

    jobs = sub.add_parser("jobs", help="inspect jobs").add_subparsers(dest="jobs_command", required=True)
    listing = jobs.add_parser("list", help="jobs, newest first")
    listing.add_argument("--user", help="only this user's jobs (user_id)")
    listing.add_argument("--status", choices=[s.value for s in JobStatus], help="only jobs in this status")
    listing.add_argument("--cluster", help="only jobs of this cluster")
    listing.add_argument("--label", action="append", type=_label, metavar="KEY=VALUE",
                         help="only jobs carrying this label (repeatable: all must match)")
    listing.add_argument("--since", type=_since, metavar="AGE|DATE",
                         help="only jobs submitted since: an age (30m, 2h, 7d) or a date (2026-11-20)")
    listing.add_argument("--limit", type=_positive, default=50, help="at most this many, newest first (default 50)")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(func=cmd_jobs_list)
    get = jobs.add_parser("get", help="one job")
    get.add_argument("job_id", help="the job's id (printed by zen submit)")
    get.add_argument("--json", action="store_true", help="print a JSON object")
    get.set_defaults(func=cmd_jobs_get)
    hist = jobs.add_parser("history", help="a job's status changes, and why")
    hist.add_argument("job_id", help="the job's id")
    hist.add_argument("--json", action="store_true", help="print a JSON array")
    hist.set_defaults(func=cmd_jobs_history)

    rejected = sub.add_parser("rejected", help="messages Zen refused, and why (newest first, a page at a time)")
    rejected.add_argument("--limit", type=_positive, default=50, help="rows in the page (default 50)")
    rejected.add_argument("--before", type=int, metavar="ID", help="the page of rows older than row ID")
    rejected.add_argument("--json", action="store_true", help="print a JSON array (with each message's payload)")
    rejected.set_defaults(func=cmd_rejected)

    explain = sub.add_parser("explain", help="why a job waits (JOB), or recent scaling decisions (CLUSTER)")
    explain.add_argument("cluster", nargs="?", metavar="JOB|CLUSTER",
                         help="a job: why it waits; a cluster: only its decisions")
    explain.add_argument("--limit", type=_positive, default=50, help="at most this many decisions (default 50)")
    explain.add_argument("--json", action="store_true", help="print JSON")
    explain.set_defaults(func=cmd_explain)

    clusters = sub.add_parser("clusters", help="the GPU shapes, regions and limits a job may ask for")
    clusters.add_argument("--json", action="store_true", help="print a JSON array")
    clusters.set_defaults(func=cmd_clusters)

    local = sub.add_parser("local", help="the whole system on this machine, or one stand-in",
                           description="zen local up|down: the whole system on this machine; "
                                       "zen local pubsub|compute|bridge: one stand-in. `zen local up --help` for its flags.")
    local.add_argument("component", choices=LOCAL_COMPONENTS, help="up, down, or one stand-in")
    local.set_defaults(func=cmd_local, passthrough=True)

    agent = sub.add_parser("agent", add_help=False, help="the VM agent: pull, claim, run, heartbeat")
    agent.set_defaults(func=cmd_agent, passthrough=True)

    simulate = sub.add_parser("simulate", add_help=False, help="replay traces against the planner and baselines")
    simulate.set_defaults(func=cmd_simulate, passthrough=True)

    from zen.cli import user as usercli

    usercli.add_parsers(sub)
    from zen.cli import queues as queuecli

    queuecli.add_parsers(sub, _db)

    from zen.cli import follow

    follow.add_parser(sub)

    from zen.cli import stats as statscli

    statscli.add_parsers(sub)
    from zen.cli import usage as usagecli

    usagecli.add_parsers(sub, _db, _since)
    demo = sub.add_parser("demo", help="the whole system on this machine, a scripted scenario, a summary")
    demo.add_argument("--scripted", action="store_true",
                      help="only the in-process lifecycle through the functions (seconds, no stand-ins)")
    demo.set_defaults(func=cmd_demo)
    return parser


def _use_local_stack() -> None:
    """Inside a running local stack's directory, talk to that stack unless told otherwise."""
    try:
        from zen_dev.local.stack import stack_env
    except ImportError:  # the deployable wheel has no local stack
        return
    for key, value in stack_env().items():
        os.environ.setdefault(key, value)


def _dispatch(argv: list[str]) -> int:
    _use_local_stack()
    parser = build_parser()
    if len(argv) >= 2 and argv[0] == "local" and argv[1] in LOCAL_COMPONENTS:
        # `zen local up --help` is up's help, not local's: the component parses its own flags.
        return cmd_local(argparse.Namespace(component=argv[1]), argv[2:])
    trailing: list[str] = []
    if "--" in argv and argv[:1] == ["submit"]:
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run(lambda: _dispatch(argv))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2


if __name__ == "__main__":
    sys.exit(main())
