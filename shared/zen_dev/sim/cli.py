"""``zen simulate``: run policies side by side on one scenario and job trace.

Prints a table (``--json``: one object keyed by policy); ``--out DIR`` also writes CSV/JSON reports
and a PNG plot (``zen_dev.sim.report``). Exit status: 0 on success, 2 on bad input (message on
stderr), 3 when a needed trace is absent.
Usage and formats: docs/reference/simulator.md
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Sequence

from zen.cli.kit import Parser, fail
from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.jobs import JobTraceError, load_jobs
from zen_dev.sim.policies import POLICY_NAMES, available_policies
from zen_dev.sim.report import format_table, json_report, write_report
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import TraceUnavailable, builtin_names, load_scenario
from zen_dev.sim.setup import unused_machine_types

DEFAULT_SCENARIO = "region-out"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="zen simulate", description="Compare scaling policies in simulation.")  # usage errors: `zen:` lines
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO,
                        help=f"a scenario YAML file or a built-in name (default {DEFAULT_SCENARIO})")
    parser.add_argument("--jobs", default=None, help="synthetic | philly | a job CSV (default: the scenario's)")
    parser.add_argument("--policies", default=",".join(POLICY_NAMES),
                        help=f"comma-separated, from {', '.join(POLICY_NAMES)} (default: all available)")
    parser.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    parser.add_argument("--horizon-s", type=float, default=None, help="override the end of the run")
    parser.add_argument("--compression", type=float, default=None, help="time compression of a trace")
    parser.add_argument("--max-jobs", type=int, default=None, help="use at most this many jobs of a trace")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--out", default=None, help="directory for CSV/JSON reports and plot.png")
    parser.add_argument("--list", action="store_true", help="list built-in scenarios and policies")
    return parser


def _fail_each(message: str) -> None:
    """Every line of ``message`` a ``zen:`` line: a scenario's problems come one a line, all of them to fix."""
    for line in message.splitlines() or [message]:
        fail(line)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print("scenarios: " + ", ".join(builtin_names()))
        print("policies:  " + ", ".join(available_policies()))
        return 0
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or not policies:
        renamed = " (oracle is now called unlimited: it was never a lower bound)" if "oracle" in unknown else ""
        fail(f"unknown policy {', '.join(unknown) or '(none)'}; known: {', '.join(POLICY_NAMES)}{renamed}")
        return 2
    for flag, value in (("--compression", args.compression), ("--horizon-s", args.horizon_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"{flag} is a finite number > 0 (got {value:g})")
            return 2
    if args.max_jobs is not None and args.max_jobs < 1:
        fail(f"--max-jobs is at least 1 (got {args.max_jobs})")
        return 2
    try:
        scenario = load_scenario(args.scenario)
        jobs = load_jobs(scenario, args.jobs, seed=args.seed, compression=args.compression, max_jobs=args.max_jobs)
    except TraceUnavailable as exc:
        _fail_each(f"a trace this scenario needs is absent: {exc}")
        return 3
    except (ScenarioError, JobTraceError) as exc:
        _fail_each(str(exc))
        return 2
    skipped: list[str] = []
    try:
        results = run_policies(scenario, jobs, policies, seed=args.seed, horizon_s=args.horizon_s, skipped=skipped)
    except ValueError as exc:
        _fail_each(str(exc))
        return 2
    if skipped and args.policies != build_parser().get_default("policies"):  # asked for by name: not there is an error
        _fail_each("; ".join(skipped))
        return 2
    for entry in skipped:
        print(f"note: {entry}: skipped", file=sys.stderr)
    if unsold := scenario.unsold():
        print(f"note: not priced, so not sold: {'; '.join(unsold)} (no VM of those pools is ever placed)",
              file=sys.stderr)
    if unused := scenario.unused_zones():
        print(f"note: capacity given for {', '.join(unused)}, where no cluster's MIG runs (its region is no "
              "cluster's, or zones: lists others for it): not used", file=sys.stderr)
    if unused := unused_machine_types(scenario):
        print(f"note: capacity given for {', '.join(unused)}, a machine type no cluster runs there: not used (check "
              "its machine_type)", file=sys.stderr)
    seed = scenario.spec.seed if args.seed is None else args.seed  # what the run drew with
    if args.json:
        print(json.dumps(json_report(results), allow_nan=False))  # strict JSON: a NaN is a bug, said
    else:
        print(f"scenario {scenario.name}: {scenario.spec.description or '-'}; {len(jobs)} jobs, seed {seed}")
        print(format_table(results))
    if args.out:
        meta = {"scenario": scenario.name, "jobs_source": args.jobs or "scenario", "seed": seed}
        for message in write_report(results, args.out, meta, scenario):
            print(message, file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
