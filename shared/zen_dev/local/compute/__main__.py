"""``zen local compute`` / ``python -m zen_dev.local.compute``: run the Compute stand-in until
SIGINT or SIGTERM.

    python -m zen_dev.local.compute --port 8085 --scenario stockout.yaml [--config zen.yaml]
"""

from __future__ import annotations

import argparse
import json
import shlex
import secrets
import sys
from typing import Sequence

from zen.core.config import load_config
from zen.core.errors import ConfigError
from zen.logs import setup_logging
from zen_dev.capacity.scenario import load_scenario
from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.local.compute.standin import ComputeStandIn
from zen_dev.local.until_stopped import stop_signals_heard


def _argv_list(text: str) -> list[str]:
    """``'["python", "-m", "zen.agent"]'`` (JSON) or ``python -m zen.agent`` (split, no shell)."""
    text = text.strip()
    if text.startswith("["):
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
            raise argparse.ArgumentTypeError("a JSON startup command must be a non-empty list of strings")
        return value
    parts = shlex.split(text)
    if not parts:
        raise argparse.ArgumentTypeError("the startup command is empty")
    return parts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zen local compute",
        description="Local Compute Engine stand-in for regional MIGs (REST), with GPU stockouts.",
    )
    parser.add_argument("--scenario", required=True, help="scenario YAML (see zen_dev/capacity/scenario.py)")
    parser.add_argument("--config", help="Zen config: adds zen-<cluster>-<region> MIGs (default when the "
                        "scenario lists no MIGs: $ZEN_CONFIG, else Zen's default config)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument("--startup-command", type=_argv_list,
                        help="command each booted VM runs (JSON list or shell-like words, no shell)")
    parser.add_argument("--log-dir", help="directory for per-VM logs (default: scenario, else .zen/compute-vms)")
    parser.add_argument("--time-scale", type=float, help="override the scenario's time_scale")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--names-salt", default=None,
                        help="mixed into VM names with the scenario's seed (default: drawn at start, so a restarted "
                             "stand-in names its VMs anew; give one for names that repeat run to run)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level.upper())  # JSON lines, as Cloud Logging reads them
    try:
        scenario = load_scenario(args.scenario)
        if args.time_scale is not None:
            if args.time_scale <= 0:
                raise ScenarioError("--time-scale", [(None, "must be > 0")])
            scenario = scenario.model_copy(update={"time_scale": args.time_scale})
        config = args.config
        if config is None and not scenario.migs:
            config = load_config()  # $ZEN_CONFIG, else Zen's default configuration
        standin = ComputeStandIn(
            scenario, host=args.host, port=args.port, config=config,
            startup_command=args.startup_command, log_dir=args.log_dir,
            names_salt=args.names_salt if args.names_salt is not None else f"/{secrets.token_hex(4)}",
        )
    except (ScenarioError, ConfigError) as exc:
        print(f"zen local compute: {exc}", file=sys.stderr)
        return 2
    with stop_signals_heard() as wait_for_stop:
        try:
            standin.start()
        except OSError as exc:
            print(f"zen local compute: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        try:
            print(f"compute stand-in listening on {standin.endpoint}", flush=True)
            wait_for_stop()
        finally:
            standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
