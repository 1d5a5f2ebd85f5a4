"""``zen watch``: the active jobs, then the latest finished ones, and the VMs per region, in one screen.

Plain text sized to the terminal (24 rows fit): the VM table first claims its rows, the jobs get the
rest, active ones before finished ones. Reads the database only (``zen.cli.kit.database``): with no
stack running it says so instead of starting one.
"""

from __future__ import annotations

import io
import shutil
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

from zen.cli.follow import READ_TIMEOUT_S  # a refresh unanswered this long is given up on, as a follow's read
from zen.cli.kit import Context, job_row, print_table
from zen.core.errors import TransientError

JOB_COLUMNS = ("job_id", "user", "cluster", "region", "status", "attempt", "wait", "duration", "exit")
VM_STATES = ("BOOTING", "IDLE", "BUSY", "STOPPING", "RETIRED")


def vms_per_region(session) -> tuple[list[dict[str, Any]], int]:
    """One row per cluster and region: its MIG's instances by state (an instance whose agent has not been
    heard from yet is BOOTING; one a scale-down drained is STOPPING whatever its agent last said: it refuses
    every claim, and shown idle while its delete failed it stood beside a job that never started); and how many
    instances there are in all (``zen watch``, the console)."""
    from zen.store import fleet, repository

    states = {vm["name"]: vm["state"] for vm in repository.list_vms(session)}
    instances = fleet.mig_instances(session)
    drained = {name for cluster in {i["cluster"] for i in instances} for name in fleet.drained_vms(session, cluster)}
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for instance in instances:
        by_state = counts.setdefault((instance["cluster"], instance["region"]), {})
        state = "STOPPING" if instance["name"] in drained else states.get(instance["name"], "BOOTING")
        by_state[state] = by_state.get(state, 0) + 1
    rows = [{"cluster": c, "region": r, **{s.lower(): by_state.get(s, 0) for s in VM_STATES}}
            for (c, r), by_state in sorted(counts.items())]
    return rows, len(instances)


def frame(db, rows: int = 24, now: datetime | None = None) -> str:
    """One screen of at most ``rows`` lines."""
    from zen.store import repository

    now = now or datetime.now(timezone.utc)
    budget = max(rows - 1, 8)  # the last row stays free for the cursor
    with db.transaction() as session:
        active, active_total = repository.active_jobs(session, limit=budget)
        finished = [j for j in repository.recent_jobs(session, limit=budget) if j.finished_at is not None]
        vm_rows, instances = vms_per_region(session)
    vm_rows = vm_rows[:max(budget // 3, 1)]
    job_budget = max(budget - (len(vm_rows) + 3) - 3, 1)  # VM title, header, rows, blank; jobs title, header
    shown = (active + finished)[:job_budget]
    out = io.StringIO()
    hidden = active_total - min(len(active), job_budget)
    more = f", {hidden} more not shown" if hidden > 0 else ""
    print(f"Jobs: {active_total} active{more}; then the latest finished    {now.astimezone():%H:%M:%S}", file=out)
    print_table([job_row(j, now) for j in shown], JOB_COLUMNS, out)
    print("", file=out)
    print(f"VMs per region ({instances} in all)", file=out)
    print_table(vm_rows, ("cluster", "region", *(s.lower() for s in VM_STATES)), out)
    return out.getvalue()


def cmd_watch(args, database: Callable[[], Any]) -> int:
    db = database()
    if db.query_timeout_s is None:  # a link gone silent (a Wi-Fi change, a sleep) froze the screen for minutes
        db.query_timeout_s = READ_TIMEOUT_S
    try:
        if args.once:
            sys.stdout.write(frame(db, shutil.get_terminal_size((100, 24)).lines))
            return 0
        # On a terminal each frame replaces the last (home and clear); into a file or a pipe, frames
        # follow each other after a blank line, with no control codes.
        terminal = sys.stdout.isatty()
        before = "\x1b[H\x1b[2J" if terminal else ""
        shown = False
        while True:
            try:
                screen = frame(db, shutil.get_terminal_size((100, 24)).lines)
            except TransientError as exc:  # once a frame was shown, a blip (Cloud SQL's maintenance) ended the watch
                if not shown:
                    raise
                print(f"zen: cannot read the database now ({exc}); trying again every {args.interval:g} s "
                      "(Ctrl-C ends the watch)", file=sys.stderr, flush=True)
                time.sleep(args.interval)
                continue
            sys.stdout.write(before + screen)
            sys.stdout.flush()
            before, shown = (before if terminal else "\n"), True
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    finally:
        db.close()


def register(sub, ctx: Context) -> None:
    watch = sub.add_parser("watch", help="active jobs first, then VMs per region; refreshes until Ctrl-C")
    watch.add_argument("--interval", type=ctx.positive_number, default=1.0, help="seconds between refreshes (default 1)")
    watch.add_argument("--once", action="store_true", help="print one screen and exit")
    watch.set_defaults(func=lambda args: cmd_watch(args, ctx.database))
