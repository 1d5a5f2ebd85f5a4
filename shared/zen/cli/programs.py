"""``zen local``, ``zen agent`` and ``zen simulate``: commands that hand their own flags to another
program (the local stack and its stand-ins, the VM agent, the simulator). The local-only ones need
``zen_dev``, imported inside these functions only: from the deployable wheel they say so
(``kit.local_only``). See docs/how-to/local.md and docs/reference/cli.md."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

from zen.cli.kit import CliError, Context, Parser, dev_help, local_only

LOCAL_COMPONENTS = ("up", "down", "pubsub", "compute", "bridge")


def cmd_agent(args, rest: list[str]) -> int:
    from zen.agent.__main__ import main as agent_main

    return agent_main(rest) or 0


def cmd_simulate(args, rest: list[str]) -> int:
    try:
        from zen_dev.sim.cli import main as simulate_main
    except ImportError:
        raise local_only("simulate") from None
    return simulate_main(rest) or 0


def cmd_local(args, rest: list[str]) -> int:
    try:
        from zen_dev.local import stack  # noqa: F401 - only to learn whether the stand-ins are installed
    except ImportError:
        raise local_only("local") from None
    if args.component == "up":
        return cmd_local_up(rest)
    if args.component == "down":
        return cmd_local_down(rest)
    if args.component == "pubsub":
        from zen_dev.local.pubsub import main as pubsub_main

        return pubsub_main(rest) or 0
    if args.component == "bridge":
        from zen_dev.local.bridge import main as bridge_main

        return bridge_main(rest) or 0
    from zen_dev.local.compute import main as compute_main

    return compute_main(rest) or 0


def _base_port(word: str) -> int:
    """``--base-port``'s value: a port whose block of 13 (``Ports.from_base``) ends by 65535. One past that failed
    deep in a socket's bind, as ``OverflowError: bind(): port must be 0-65535``, not as the flag's error."""
    try:
        base = int(word)
    except ValueError:  # said as argparse says it of type=int (of this function it would name "_base_port")
        raise argparse.ArgumentTypeError(f"invalid int value: {word!r}") from None
    if not 1 <= base <= 65535 - 12:
        raise argparse.ArgumentTypeError(f"{base}: the stack's 13 ports, {base} to {base + 12}, must lie within "
                                         "1-65535: pick one from 1 to 65523")
    return base


def cmd_local_up(argv: list[str]) -> int:
    from zen_dev.local.stack import LocalStack, Ports, StackError

    parser = Parser(prog="zen local up")
    parser.add_argument("--scenario", type=Path, help="Compute scenario (default: preferred region stocked out)")
    parser.add_argument("--time-scale", type=float, help="cloud seconds per real second (overrides the scenario)")
    parser.add_argument("--config", type=Path, help="Zen config (default: $ZEN_CONFIG or the shipped one)")
    parser.add_argument("--base-port", type=_base_port, default=8085,
                        help="first of the ports the stand-ins and functions listen on (default 8085)")
    parser.add_argument("--tick-every", type=float, default=5.0, help="scale tick period, seconds (default 5)")
    parser.add_argument("--fresh", action="store_true", help="start with an empty database")
    parser.add_argument("--bucket", action="append", default=[], metavar="NAME=LOCATION",
                        help="a bucket to create in the storage stand-in besides the configured data.bucket_locations "
                             "(e.g. my-data=europe-west4; repeatable)")
    args = parser.parse_args(argv)
    buckets = dict(b.partition("=")[::2] for b in args.bucket)
    stack = LocalStack(config_path=args.config, scenario=args.scenario, time_scale=args.time_scale,
                       tick_every_s=args.tick_every, ports=Ports.from_base(args.base_port), fresh=args.fresh,
                       buckets={name: location or "US" for name, location in buckets.items()})
    try:
        record = stack.up()
    except StackError as exc:
        raise CliError(f"the local stack did not start: {exc}") from None
    from zen_dev.local.stack import read_stack

    # SIGTERM as Ctrl-C (an Event set from the handler could deadlock on the lock Event.wait holds), from before
    # the lines that say how to stop it: one sent as soon as they are read killed the process, the stack left up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        print("Zen is running locally:")
        for name, port in record["ports"].items():
            print(f"  {name:<18} 127.0.0.1:{port}")
        print(f"  {'postgres':<18} {record['env']['ZEN_DATABASE_URL']}")
        print(f"  logs               {record['logs']}/")
        print(f"  {'web console':<18} {record['console']}")
        if stack.republished:
            print(f"  {stack.republished} job(s) QUEUED before: their starts are published again")
        print("Submit a job:  zen submit --cluster 1xl4 -- python -c 'print(42)'")
        print("Watch:         zen watch      Stop everything: Ctrl-C here, or `zen local down`", flush=True)
        # Until Ctrl-C, SIGTERM, or `zen local down` from elsewhere (the record disappears).
        while read_stack(stack.home) is not None:
            time.sleep(1.0)
        print("stopped by `zen local down`", flush=True)  # no Ctrl-C to speak of; down() below stops any left
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second one while it stops: its processes would be left
        signal.signal(sig, signal.SIG_IGN)
    if interrupted:
        print("stopping... (a second Ctrl-C is ignored: the stack's processes are all stopped first)", flush=True)
    stack.down()
    if interrupted:
        print("stopped", flush=True)
    return 0


def cmd_local_down(argv: list[str]) -> int:
    from zen_dev.local.stack import down

    parser = Parser(prog="zen local down", description="Stop the local stack running from this directory or the "
                    "nearest above it (.zen/stack.json), as the other commands find it, else a demo's left running "
                    "here (.zen/demo), and its Postgres; the data stays in .zen/pgdata.")
    parser.add_argument("--home", type=Path, help="the folder the stack runs in (or its .zen, or the demo's .zen/demo)")
    stopped = down(parser.parse_args(argv).home)
    print("stopped: " + ", ".join(stopped) if stopped else "no local stack is running")
    return 0


def cmd_console(args, rest: list[str]) -> int:
    """``zen console [--host H] [--port P]``: the web console on its own, against ZEN_DATABASE_URL (or the
    local stack this directory runs), as ``zen local up`` serves it (docs/how-to/console.md)."""
    from zen.cli.kit import database
    from zen.console.serve import main as console_main

    if not {"-h", "--help"} & set(rest):  # help never needs one
        database()  # none (CliError, as every read command says it), or a malformed ZEN_DATABASE_URL (exit 2)
    return console_main(rest) or 0


def register(sub, ctx: Context) -> None:
    local = sub.add_parser("local", **dev_help("the whole system on this machine, or one stand-in"),
                           description="zen local up|down: the whole system on this machine; "
                                       "zen local pubsub|compute|bridge: one stand-in. `zen local up --help` for its flags.")
    local.add_argument("component", choices=LOCAL_COMPONENTS, help="up, down, or one stand-in")
    local.set_defaults(func=cmd_local, passthrough=True)

    agent = sub.add_parser("agent", add_help=False, help="the VM agent: pull, claim, run, heartbeat")
    agent.set_defaults(func=cmd_agent, passthrough=True)

    console = sub.add_parser("console", add_help=False, help="serve the read-only web console (--port, --host)")
    console.set_defaults(func=cmd_console, passthrough=True)

    simulate = sub.add_parser("simulate", add_help=False,
                              **dev_help("replay traces against the planner and baselines"))
    simulate.set_defaults(func=cmd_simulate, passthrough=True)
