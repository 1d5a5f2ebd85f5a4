"""``make faults``: every fault check at the full budget, one summary line each; exit 1 on a failure."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.faults.auth import AUTH_BUDGETS, AuthStack, auth_refusals
from tests.faults.checks import BUDGETS, run_all
from tests.faults.harness import FaultStack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="full")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=4, help="concurrent deliveries and request threads")
    args = parser.parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="zen-faults-"))
    began = time.monotonic()
    with FaultStack(threads=args.workers, log_dir=log_dir) as stack:
        results = run_all(stack, args.budget, args.seed)
    (log_dir / "auth").mkdir()
    with AuthStack(threads=args.workers, log_dir=log_dir / "auth") as auth:  # ZEN_AUTH=required, queues with rules
        results.append(auth_refusals(auth, AUTH_BUDGETS[args.budget], args.seed))
    total = sum(r.cases for r in results)
    for result in results:
        print(result.line())
    failed = [r for r in results if not r.ok]
    content_5xx = sum(r.content_5xx for r in results)
    print(f"{'PASS' if not failed else 'FAIL'}  {total} cases, {args.workers} concurrent deliveries, "
          f"{content_5xx} content-caused 5xx, {len(failed)} failed checks, {time.monotonic() - began:.0f}s "
          f"(function logs: {log_dir})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
