"""The store's looks for queued jobs their configuration no longer serves (``JobTx.queued_jobs_of_other_clusters``:
their cluster removed; ``JobTx.queued_jobs_unfit``: the one model they accept gone, flex-start's run shorter than
the max_runtime_s they named, a gang above the cluster's node limits, every region they named gone; the tick holds
them before its scaling pass, ``zen.jobs.stranding``), alike in Postgres and in memory, NULLs and empty lists
included."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.test_jobstore_contract import CLUSTER, NOW, REGION, a_job, inserted, moved, store  # noqa: F401 - fixture
from zen.core.gang_records import GangNode
from zen.core.models import Job, JobStatus


def queued(job_id: str, asked: dict[str, Any] | None = None, **changes: Any) -> Job:
    request = {"job_id": job_id, "command": ["true"], **(asked or {})}
    return a_job(job_id, JobStatus.QUEUED, request=request, **changes)


def in_line(store, *job_ids: str, claimed: tuple[str, ...] = ()) -> None:  # noqa: F811 - the fixture
    """Each of ``job_ids`` QUEUED a second after the one before (those ``claimed`` with a gang node claimed)."""
    node = GangNode(rank=0, vm="vm-a", region=REGION, zone=f"{REGION}-a", beat_at=NOW)
    for second, job_id in enumerate(job_ids):
        gang = {"gang": [node]} if job_id in claimed else {}
        moved(store, job_id, [], queued_at=NOW + timedelta(seconds=second), **gang)


def test_queued_jobs_of_clusters_not_configured_are_found_below_between_and_above_the_configured(store):  # noqa: F811
    inserted(store, queued("above", cluster="z-gone"), queued("kept", cluster="c"), queued("between", cluster="b"),
             queued("below", cluster="0-gone"), queued("claimed", cluster="b", nodes=2),
             a_job("pending", cluster="b"), queued("first", cluster="a"))
    in_line(store, "above", "kept", "between", "below", "claimed", "first", claimed=("claimed",))
    with store.transaction() as tx:
        assert tx.queued_jobs_of_other_clusters(["c", "a"], 10) == ["above", "between", "below"]
        assert tx.queued_jobs_of_other_clusters(["a", "a", "c"], 10) == ["above", "between", "below"]
        assert tx.queued_jobs_of_other_clusters(["a", "b", "c"], 10) == ["above", "below"]
        assert tx.queued_jobs_of_other_clusters(["0-gone", "a", "b", "c", "z-gone"], 10) == []
        assert tx.queued_jobs_of_other_clusters(["b"], 10) == ["above", "kept", "below", "first"]


def test_queued_jobs_asking_a_model_their_cluster_lists_no_more_are_found_not_those_accepting_any(store):  # noqa: F811
    inserted(store, queued("standard", {"provisioning": "standard"}), queued("any", {"provisioning": "any"}),
             queued("unnamed"), queued("null", {"provisioning": None}), queued("spot", {"provisioning": "spot"}),
             queued("other", {"provisioning": "standard"}, cluster="other"))
    in_line(store, "standard", "any", "unnamed", "null", "spot", "other")
    with store.transaction() as tx:
        assert tx.queued_jobs_unfit(CLUSTER, ["standard"], 3600, 8, [REGION], 10) == ["standard"]
        assert tx.queued_jobs_unfit(CLUSTER, ["standard", "flex-start"], 3600, 8, [REGION], 10) == ["standard"]
        assert tx.queued_jobs_unfit(CLUSTER, ["spot", "standard"], 3600, 8, [REGION], 1) == ["standard"]
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 8, [REGION], 10) == []  # it lists every model


def test_flex_start_jobs_named_longer_than_its_run_are_found_not_those_naming_none(store):  # noqa: F811
    inserted(store, queued("long", {"provisioning": "flex-start", "max_runtime_s": 7200}),
             queued("unnamed", {"provisioning": "flex-start"}, max_runtime_s=86400),
             queued("short", {"provisioning": "flex-start", "max_runtime_s": 3600}),
             queued("spot", {"provisioning": "spot", "max_runtime_s": 7200}))
    in_line(store, "long", "unnamed", "short", "spot")
    with store.transaction() as tx:
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 8, [REGION], 10) == ["long"]
        assert tx.queued_jobs_unfit(CLUSTER, [], 7200, 8, [REGION], 10) == []


def test_jobs_accepting_any_model_named_longer_than_flex_start_runs_are_found_where_it_is_alone(store):  # noqa: F811
    inserted(store, queued("any", {"provisioning": "any", "max_runtime_s": 7200}),
             queued("unnamed-model", {"max_runtime_s": 7200}), queued("short", {"max_runtime_s": 3600}),
             queued("no-runtime", max_runtime_s=86400), queued("spot", {"provisioning": "spot", "max_runtime_s": 7200}))
    in_line(store, "any", "unnamed-model", "short", "no-runtime", "spot")
    with store.transaction() as tx:
        assert tx.queued_jobs_unfit(CLUSTER, ["spot", "standard"], 3600, 8, [REGION], 10, flex_alone=True) == [
            "any", "unnamed-model", "spot"]
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 8, [REGION], 10) == []  # other models it lists run them


def test_gangs_above_the_most_nodes_and_jobs_allowed_none_of_the_regions_they_named_are_found(store):  # noqa: F811
    west, east = "us-west1", "us-east1"
    inserted(store, queued("three", {"nodes": 3}, nodes=3), queued("two", {"nodes": 2}, nodes=2), queued("one"),
             queued("claimed", {"nodes": 3}, nodes=3),
             queued("west", {"regions": [west]}, regions=[west]),
             queued("both", {"regions": [west, REGION]}, regions=[REGION, west]),
             queued("west-too", {"regions": [west]}, regions=[west]),
             queued("unnamed", regions=[west]), queued("empty", {"regions": [east, west]}, regions=[]),
             queued("null", {"regions": None}, regions=[west]))
    in_line(store, "three", "two", "one", "claimed", "west", "both", "west-too", "unnamed", "empty", "null",
            claimed=("claimed",))
    with store.transaction() as tx:
        # (one allowed no region now, "empty", is a candidate wherever it named: the tick reads why, stranding.stranded)
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 2, [REGION], 10) == ["three", "west", "west-too", "empty"]
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 1, [REGION, east], 10) == [
            "three", "two", "west", "west-too", "empty"]
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 3, [west], 10) == ["empty"]
        assert tx.queued_jobs_unfit(CLUSTER, [], 3600, 3, [west], 0) == []
