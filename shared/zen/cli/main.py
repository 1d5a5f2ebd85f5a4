"""The ``zen`` command: the parser, built by the command modules (each ``register(sub, ctx)``, in
``COMMANDS`` order, which is ``zen --help``'s), and the dispatch. Every command is in
docs/reference/cli.md; one-line errors and exit codes are ``zen.cli.kit``."""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import sys
from typing import Sequence

from zen.cli import clusters, demo, follow, programs, queues, records, stats, usage, user, watch
from zen.cli.jobfiles import is_job_file
from zen.cli.kit import Context, Parser, run

COMMANDS = (records, clusters, programs, user, watch, queues, follow, stats, usage, demo)


def build_parser(ctx: Context | None = None) -> argparse.ArgumentParser:
    parser = Parser(prog="zen", description="Zen: multi-region GPU job scheduler")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ctx = ctx or Context()
    for module in COMMANDS:
        module.register(sub, ctx)
    return parser


def _use_local_stack() -> None:
    """Inside a running local stack's directory, talk to that stack unless told otherwise: a ``ZEN_PROJECT`` other
    than the stack's is a deployed Zen's (the deploy guide's), reached as from any other directory (taken with the
    stack's emulators instead, a submit failed "topic not found", and blamed the stack)."""
    try:
        from zen_dev.local.stackfile import stack_env
    except ImportError:  # the deployable wheel has no local stack
        return
    env = stack_env()
    if os.environ.get("ZEN_PROJECT") and os.environ["ZEN_PROJECT"] != env.get("ZEN_PROJECT", os.environ["ZEN_PROJECT"]):
        return
    for key, value in env.items():
        os.environ.setdefault(key, value)


def _dispatch(argv: list[str]) -> int:
    _use_local_stack()
    parser = build_parser()
    if len(argv) >= 2 and argv[0] == "local" and argv[1] in programs.LOCAL_COMPONENTS:
        # `zen local up --help` is up's help, not local's: the component parses its own flags.
        return programs.cmd_local(argparse.Namespace(component=argv[1]), argv[2:])
    trailing: list[str] = []
    if "--" in argv and argv[:1] == ["submit"]:
        # `zen submit [FILE] [flags] -- PROGRAM ARGS`: everything after -- is the job's command.
        cut = argv.index("--")
        argv, trailing = argv[:cut], argv[cut + 1:]
    if argv[:1] and argv[0].startswith("-") and argv[0].split("=")[0] not in parser._option_string_actions:
        _misplaced(parser, argv, [argv[0]])  # `zen --cluster c submit`: argparse would call c the command
    args, rest = parser.parse_known_args(argv)
    args.trailing = trailing
    if getattr(args, "passthrough", False):
        return args.func(args, rest)
    if rest:
        _misplaced(parser, argv, rest)
        named = _named(parser, argv)
        program = [w for w in args.words[:1] if not is_job_file(w)] + args.words[1:] if argv[:1] == ["submit"] else []
        # A word after the job's program is the job's own (its flags, the -- left out), not a mistyped flag of Zen's.
        hint = _closest(named, [w for w in rest if not program or argv.index(w) < argv.index(program[0])])
        if not hint and argv[:1] == ["submit"] and not trailing:  # a job's own flags (python -c ...) without the --
            hint = f" (a job's command goes after --: zen submit ... -- {shlex.join(args.words + rest)})"
        named.error(f"unrecognized arguments: {' '.join(rest)}{hint}")
    return args.func(args)


def _misplaced(parser: argparse.ArgumentParser, argv: list[str], rest: list[str]) -> None:
    """A usage error naming where the flags of ``rest`` that the named command has go (``zen --json jobs list``:
    "--json goes after the command: zen jobs list --json"); nothing when it has none of them."""
    path, named = _command(parser, argv)
    misplaced = [word for word in rest if word.startswith("-") and word.split("=")[0] in named._option_string_actions]
    if path and misplaced:
        at = argv.index(misplaced[0])
        value = [argv[at + 1]] if "=" not in misplaced[0] and at + 1 < len(argv) and argv[at + 1] not in path and (
            named._option_string_actions[misplaced[0]].nargs != 0) else []
        named.error(f"{' '.join(misplaced)} goes after the command: zen {' '.join(path + [misplaced[0]] + value)} ...")


def _closest(named: argparse.ArgumentParser, rest: list[str]) -> str:
    """" (did you mean --cluster?)" for a mistyped flag of the command (``--clustr``), else "", as a job file's
    mistyped field is told the field it is closest to."""
    flags = [flag for flag in named._option_string_actions if flag.startswith("--")]
    for word in rest:
        close = difflib.get_close_matches(word.split("=")[0], flags, n=1, cutoff=0.8) if word.startswith("--") else []
        if close:
            return f" (did you mean {close[0]}?)"
    return ""


def _named(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` names (``zen jobs list``'s for ``jobs list --usr x``): its usage error
    names that command's ``--help``, which lists the flags (``zen --help`` does not)."""
    return _command(parser, argv)[1]


def _command(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], argparse.ArgumentParser]:
    """The words of ``argv`` that name a command (``["jobs", "list"]``, wherever they stand) and that command's parser."""
    path: list[str] = []
    for word in argv:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subcommands:
            break
        if word in subcommands[0].choices:
            path.append(word)
            parser = subcommands[0].choices[word]
    return path, parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run(lambda: _dispatch(argv))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2


if __name__ == "__main__":
    sys.exit(main())
