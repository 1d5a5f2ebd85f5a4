"""``zen explain`` and ``zen clusters``: a cluster's recent scaling decisions (a job's reasons are
``zen.cli.queues.explain_job``), and the GPU shapes, regions and limits a job may ask for
(docs/reference/cli.md)."""

from __future__ import annotations

import json
import os

from zen.cli.kit import Context, print_table


def cmd_explain(args, ctx: Context) -> int:
    from zen.core.config import load_config
    from zen.store import fleet

    if args.cluster and load_config().cluster(args.cluster) is None:  # not a cluster: a job
        from zen.cli.queues import explain_job

        return explain_job(args.cluster, args.json, ctx.database())
    with ctx.database().transaction() as session:
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


def register(sub, ctx: Context) -> None:
    explain = sub.add_parser("explain", help="why a job waits (JOB), or recent scaling decisions (CLUSTER)")
    explain.add_argument("cluster", nargs="?", metavar="JOB|CLUSTER",
                         help="a job: why it waits; a cluster: only its decisions")
    explain.add_argument("--limit", type=ctx.positive, default=50, help="at most this many decisions (default 50)")
    explain.add_argument("--json", action="store_true", help="print JSON")
    explain.set_defaults(func=lambda args: cmd_explain(args, ctx))

    clusters = sub.add_parser("clusters", help="the GPU shapes, regions and limits a job may ask for")
    clusters.add_argument("--json", action="store_true", help="print a JSON array")
    clusters.set_defaults(func=cmd_clusters)
