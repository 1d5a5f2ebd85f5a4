"""The demo's "moved to a cheaper region" lines (``zen_dev.demo.dollars.cheaper_moves``): a pool priced below
the cluster's first region's, whether or not the decision's reason names the first region."""

from __future__ import annotations

from datetime import datetime, timezone

import zen_dev.demo as demo
from zen.core.config import load_config
from zen_dev.demo.dollars import cheaper_moves

AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def add(region: str, reason: str) -> dict:
    return dict(at=AT, cluster="1xl4", region=region, action="ADD", reason=reason)


def test_a_cheaper_pool_counts_whether_or_not_its_reason_names_the_first_region():
    config = load_config(demo.HERE / "zen-demo.yaml")  # us-east4's L4s at $0.72/h, below us-central1's
    named = add("us-east4", "1 queued job(s) without a VM: $0.72/h (standard), before us-central1 $0.85/h (standard)")
    unnamed = add("us-east4", "2 queued job(s) without a VM: $0.72/h (standard), before europe-west4 $0.90/h (standard)")
    shared = add("us-east4", "2 VM(s) for queued jobs, several per VM: $0.72/h (standard)")  # max_jobs_per_vm > 1
    gang = add("us-east4", "2 VM(s) for 1 queued gang(s): $0.72/h (standard), before europe-west4 $0.90/h (standard)")
    dearer = add("europe-west4", "1 queued job(s) without a VM: $0.90/h (standard)")
    first = add("us-central1", "1 queued job(s) without a VM: $0.85/h (standard)")
    hedge = add("us-east4", "1 hedge(s): the first choice's delivery is uncertain: $0.72/h (standard), at most 1.25x "
                            "the first choice's (hedge_price_ratio)")
    spare = add("us-east4", "1 spare boot(s): $0.72/h (standard): a job starts at the first of its two boots")
    lines = cheaper_moves([named, unnamed, shared, gang, dearer, first, hedge, spare], config)
    assert [line.split(": ", 1)[1] for line in lines] == [named["reason"], unnamed["reason"], shared["reason"],
                                                         gang["reason"]]


def test_the_first_regions_price_is_the_one_the_planner_named_in_the_run_where_it_named_one():
    config = load_config(demo.HERE / "zen-demo.yaml")
    first = dict(at=AT, cluster="4xa100-40gb", region="us-central1", action="ADD",
                 reason="1 queued job(s) without a VM: $14.69/h (standard), before us-west1 $14.69/h (standard)")
    same = dict(at=AT, cluster="4xa100-40gb", region="us-west1", action="ADD",
                reason="1 queued job(s) without a VM: $14.69/h (standard), before europe-west4 $14.99/h (standard)")
    assert cheaper_moves([first, same], config) == []  # us-west1 costs what us-central1 costs
