"""``zen demo``: the whole system on this machine playing a scenario, or (``--scripted``) only the job
lifecycle through the functions; both are ``zen_dev.demo`` (docs/README.md, "What works today")."""

from __future__ import annotations

from zen.cli.kit import Context, dev_help, local_only


def cmd_demo(args) -> int:
    try:
        if args.scripted:
            from zen_dev.demo.scripted import main as scripted_main

            return scripted_main()
        from zen_dev.demo import main as demo_main
    except ImportError:
        raise local_only("demo") from None
    return demo_main()


def register(sub, ctx: Context) -> None:
    demo = sub.add_parser("demo", **dev_help("the whole system on this machine, a scripted scenario, a summary"))
    demo.add_argument("--scripted", action="store_true",
                      help="only the in-process lifecycle through the functions (seconds, no stand-ins)")
    demo.set_defaults(func=cmd_demo)
