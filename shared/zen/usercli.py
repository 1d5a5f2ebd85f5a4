"""The user-facing ``zen`` commands that talk to a running Zen: submit, stop, watch, local up/down.

They publish through the official Pub/Sub client (``PUBSUB_EMULATOR_HOST`` for a local stack, which
``zen`` reads from ``.zen/stack.json`` when a stack is running) and read Postgres for ``watch``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path

import yaml

from zen.config import load_config
from zen.models import JobRequest, StopRequest


def _publish(topic_field: str, payload: bytes) -> str:
    from google.cloud import pubsub_v1

    config = load_config()
    project = os.environ.get("ZEN_PROJECT") or config.project
    client = pubsub_v1.PublisherClient()
    topic = client.topic_path(project, getattr(config.topics, topic_field))
    return client.publish(topic, payload).result(timeout=30)


def build_request(args) -> JobRequest:
    """A JobRequest from a YAML/JSON file, with flags filling or overriding fields."""
    data: dict = {}
    words = list(args.words) + list(getattr(args, "trailing", []))
    args.file = None
    if words and words[0].endswith((".yaml", ".yml", ".json")) and Path(words[0]).is_file():
        args.file = words.pop(0)
    args.command = words
    if args.file:
        text = Path(args.file).read_text()
        data = yaml.safe_load(text) if not args.file.endswith(".json") else json.loads(text)
        if not isinstance(data, dict):
            raise SystemExit(f"{args.file}: expected a mapping of JobRequest fields")
    flags = {"job_id": args.job_id, "user_id": args.user, "cluster": args.cluster, "gpu_type": args.gpu_type,
             "gpu_count": args.gpu_count, "image": args.image, "priority": args.priority,
             "max_runtime_s": args.max_runtime, "max_attempts": args.max_attempts,
             "regions": args.region or None, "command": args.command or None}
    data.update({k: v for k, v in flags.items() if v is not None})
    if args.env:
        data["env"] = {**data.get("env", {}), **dict(item.split("=", 1) for item in args.env)}
    data.setdefault("user_id", os.environ.get("USER", "local"))
    return JobRequest.model_validate(data)


def cmd_submit(args) -> int:
    try:
        request = build_request(args)
    except Exception as exc:  # noqa: BLE001 - shown to the user as is
        print(f"invalid job request: {exc}")
        return 2
    message_id = _publish("job_submitted", request.to_bytes())
    print(f"submitted {request.job_id or message_id} (message {message_id})", flush=True)
    if args.wait:
        from zen.follow import follow_submitted

        return follow_submitted(request.job_id or message_id)
    return 0


def cmd_stop(args) -> int:
    message_id = _publish("job_stop", StopRequest(job_id=args.job_id, reason=args.reason).to_bytes())
    print(f"stop requested for {args.job_id} (message {message_id})")
    return 0


def watch_frame(db):
    """One frame of ``zen watch``: jobs, and VMs per region (a rich renderable)."""
    from rich.console import Group
    from rich.table import Table

    from zen.store import fleet, repository

    with db.transaction() as session:
        jobs = repository.list_jobs(session)
        vms = repository.list_vms(session)
        instances = fleet.mig_instances(session)
    job_table = Table(title=f"Jobs ({len(jobs)})")
    for column in ("job", "status", "attempt", "cluster", "region", "vm", "exit"):
        job_table.add_column(column)
    for job in jobs[-25:]:
        job_table.add_row(job.job_id, job.status.value, str(job.attempt), job.cluster, job.region or "",
                          job.vm or "", "" if job.exit_code is None else str(job.exit_code))
    states = {vm["name"]: vm["state"] for vm in vms}
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for instance in instances:
        key = (instance["cluster"], instance["region"])
        state = states.get(instance["name"], "BOOTING")
        counts.setdefault(key, {}).setdefault(state, 0)
        counts[key][state] += 1
    vm_table = Table(title="VMs per region")
    for column in ("cluster", "region", "booting", "idle", "busy", "stopping"):
        vm_table.add_column(column)
    for (cluster, region), by_state in sorted(counts.items()):
        vm_table.add_row(cluster, region, *(str(by_state.get(s, 0)) for s in ("BOOTING", "IDLE", "BUSY", "STOPPING")))
    return Group(job_table, vm_table)


def cmd_watch(args) -> int:
    from rich.console import Console
    from rich.live import Live

    from zen.store.db import Database

    db = Database.from_env()
    console = Console()
    if args.once:
        console.print(watch_frame(db))
        return 0
    with Live(watch_frame(db), console=console, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(args.interval)
                live.update(watch_frame(db))
        except KeyboardInterrupt:
            pass
    return 0


def cmd_local_up(argv: list[str]) -> int:
    from zen.local.stack import LocalStack, Ports, StackError

    parser = argparse.ArgumentParser(prog="zen local up")
    parser.add_argument("--scenario", type=Path, help="Compute scenario (default: preferred region stocked out)")
    parser.add_argument("--time-scale", type=float, help="cloud seconds per real second (overrides the scenario)")
    parser.add_argument("--config", type=Path, help="Zen config (default: $ZEN_CONFIG or the shipped one)")
    parser.add_argument("--base-port", type=int, default=8085)
    parser.add_argument("--tick-every", type=float, default=5.0, help="scale tick period, seconds")
    parser.add_argument("--fresh", action="store_true", help="start with an empty database")
    args = parser.parse_args(argv)
    stack = LocalStack(config_path=args.config, scenario=args.scenario, time_scale=args.time_scale,
                       tick_every_s=args.tick_every, ports=Ports.from_base(args.base_port), fresh=args.fresh)
    try:
        record = stack.up()
    except StackError as exc:
        print(f"zen local up: {exc}")
        return 1
    print("Zen is running locally:")
    for name, port in record["ports"].items():
        print(f"  {name:<18} 127.0.0.1:{port}")
    print(f"  {'postgres':<18} {record['env']['ZEN_DATABASE_URL']}")
    print(f"  logs               {record['logs']}/")
    print("Submit a job:  zen submit --cluster 1xl4 -- python -c 'print(42)'")
    print("Watch:         zen watch      Stop everything: Ctrl-C here, or `zen local down`")
    from zen.local.stack import read_stack

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        # Until Ctrl-C, SIGTERM, or `zen local down` from elsewhere (the record disappears).
        while not done.wait(1.0) and read_stack(stack.home) is not None:
            pass
    except KeyboardInterrupt:
        pass
    print("stopping...")
    stack.down()
    return 0


def cmd_local_down(argv: list[str]) -> int:
    from zen.local.stack import down

    stopped = down()
    print("stopped: " + ", ".join(stopped) if stopped else "no local stack is running")
    return 0


def add_parsers(sub) -> None:
    submit = sub.add_parser("submit", help="publish a job (a YAML/JSON JobRequest file, and/or flags)")
    submit.add_argument("--job-id")
    submit.add_argument("--user")
    submit.add_argument("--cluster")
    submit.add_argument("--gpu-type")
    submit.add_argument("--gpu-count", type=int)
    submit.add_argument("--image")
    submit.add_argument("--priority", type=int)
    submit.add_argument("--max-runtime", type=int, help="seconds")
    submit.add_argument("--max-attempts", type=int)
    submit.add_argument("--region", action="append", help="allowed region (repeatable)")
    submit.add_argument("--env", action="append", help="KEY=VALUE (repeatable)")
    submit.add_argument("-f", "--wait", "--follow", dest="wait", action="store_true",
                        help="follow the job to its end, printing its output; exit with its exit code")
    submit.add_argument("words", nargs="*", metavar="[FILE] [-- PROGRAM ARGS]",
                        help="a JobRequest file (.yaml/.yml/.json), and/or the command after --")
    submit.set_defaults(func=cmd_submit)
    stop = sub.add_parser("stop", help="ask to stop a job")
    stop.add_argument("job_id")
    stop.add_argument("--reason")
    stop.set_defaults(func=cmd_stop)
    watch = sub.add_parser("watch", help="live table of jobs and VMs per region")
    watch.add_argument("--interval", type=float, default=1.0)
    watch.add_argument("--once", action="store_true", help="print one frame and exit")
    watch.set_defaults(func=cmd_watch)
