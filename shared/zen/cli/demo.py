"""``zen demo``: the whole system on this machine playing a scenario, or (``--scripted``) only the job
lifecycle through the functions; both are ``zen_dev.demo`` (docs/README.md, "What works today")."""

from __future__ import annotations

from zen.cli.kit import CliError, Context, dev_help, local_only


def cmd_demo(args) -> int:
    try:
        if args.scripted:
            from zen_dev.demo.scripted import main as scripted_main

            return scripted_main()
        from zen_dev.demo import main as demo_main
        from zen_dev.local.stack import StackError
    except ImportError:
        raise local_only("demo") from None
    try:
        return demo_main(base_port=args.base_port)
    except StackError as exc:  # a port taken, a demo's stack left running: said as `zen local up` says it
        raise CliError(f"the demo's stack did not start: {exc}") from None


def register(sub, ctx: Context) -> None:
    demo = sub.add_parser("demo", **dev_help("the whole system on this machine, a scripted scenario, a summary"))
    demo.add_argument("--scripted", action="store_true",
                      help="only the in-process lifecycle through the functions (seconds, no stand-ins)")
    demo.add_argument("--base-port", type=int, default=8185,
                      help="first of the ports its stand-ins and functions listen on (default 8185, to 8197; make demo "
                           "DEMO_ARGS='--base-port 9100')")
    demo.set_defaults(func=cmd_demo)
