"""MigManager against the Compute stand-in, through the official google-cloud-compute client."""

from __future__ import annotations

import pytest
from google.cloud import compute_v1

from zen.adapters.compute import MigApiError, MigManager, MigNotFound, MigRateLimited, compute_clients_from_env
from zen.scaling.model import ErrorKind
from zen_dev.local.compute import ComputeStandIn, ManualClock

PROJECT, REGION, MIG = "test-proj", "us-central1", "zen-4xa100-40gb-us-central1"
ZONES = [f"{REGION}-a", f"{REGION}-b", f"{REGION}-c"]


def scenario(**extra):
    base = {
        "project": PROJECT, "seed": 1,
        "migs": [{"name": MIG, "region": REGION, "machine_type": "a2-highgpu-4g", "cluster": "4xa100-40gb"}],
        "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
    }
    base.update(extra)
    return base


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    started = []

    def make(**extra):
        standin = ComputeStandIn(scenario(**extra), clock=ManualClock(), log_dir=tmp_path).start()
        started.append(standin)
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        return standin, MigManager(PROJECT, REGION, MIG, *compute_clients_from_env())

    yield make
    for standin in started:
        standin.stop()


def test_resize_then_instances_boot(cloud):
    standin, mig = cloud()
    mig.resize(2)
    assert mig.target_size() == 2
    assert [(i.current_action, i.running) for i in mig.instances()] == [("CREATING", False)] * 2
    standin.advance(61)
    instances = mig.instances()
    assert all(i.running and i.zone in ZONES and i.creation_error is None for i in instances)


def test_stockout_errors_are_read_and_classified(cloud):
    standin, mig = cloud(capacity={"schedule": [{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES]})
    mig.resize(1)
    [instance] = mig.instances()
    assert instance.current_action == "CREATING" and instance.creation_error is ErrorKind.STOCKOUT
    first = mig.errors()
    assert [e.kind for e in first] == [ErrorKind.STOCKOUT] and first[0].instance == instance.name
    standin.advance(30)
    assert len(mig.errors()) == 2 and mig.errors(since=first[-1].at)[0].kind is ErrorKind.STOCKOUT


def test_quota_errors_are_classified(cloud):
    standin, mig = cloud(faults={"quota": [{"region": REGION, "limit": 0}]})
    mig.resize(1)
    assert [e.kind for e in mig.errors()] == [ErrorKind.QUOTA]


def test_delete_instances_removes_exactly_the_named_ones(cloud):
    standin, mig = cloud()
    mig.resize(3)
    standin.advance(61)
    instances = mig.instances()
    victim = instances[1]
    mig.delete_instances([victim.name], {victim.name: victim.zone})
    assert sorted(i.name for i in mig.instances()) == sorted(i.name for i in instances if i is not victim)
    assert mig.target_size() == 2
    mig.delete_instances([victim.name], {victim.name: victim.zone})  # a retry: already gone, no error
    assert mig.target_size() == 2


def test_a_name_without_a_zone_does_not_stop_the_others_deletion(cloud):
    """Compute refuses a whole deleteInstances call holding a reference that is not a URL; a name the
    listing gave no zone for was sent bare with the others, so none of them was deleted, every pass."""
    standin, mig = cloud()
    mig.resize(2)
    standin.advance(61)
    first, second = mig.instances()
    with pytest.raises(MigApiError):
        mig.delete_instances([first.name, second.name], {first.name: first.zone, second.name: None})
    assert [i.name for i in mig.instances()] == [second.name] and mig.target_size() == 1


def test_unknown_mig_and_rate_limits_are_translated(cloud):
    standin, mig = cloud(faults={"rate_limit": {"fraction": 1.0}})
    with pytest.raises(MigRateLimited):
        mig.target_size()
    standin2, _ = cloud()
    missing = MigManager(PROJECT, REGION, "no-such-mig", *compute_clients_from_env())
    with pytest.raises(MigNotFound):
        missing.instances()


def test_a_write_returns_without_waiting_for_its_operation(cloud):
    """Compute's resize is DONE once its actions are scheduled, and regionOperations.wait promises no
    more: waiting on it only held the pass, and its locks, idle (up to a minute per write)."""
    import time

    standin, mig = cloud(api={"operation_delay_s": 30})
    calls, began = mig.api_calls, time.monotonic()
    mig.resize(2)  # the operation stays RUNNING for 30 s of the stand-in's (manual) clock
    victim = mig.instances()[0]
    mig.delete_instances([victim.name], {victim.name: victim.zone})
    assert time.monotonic() - began < 5
    # the MIG's operations in flight (none), its target, resize, get its operation; listManagedInstances; delete, get
    assert mig.api_calls - calls == 7
    assert mig.target_size() == 1


class Operations:
    """A RegionOperationsClient whose ``get`` answers ``answer`` (or raises it), and records its calls."""

    def __init__(self, answer):
        self.answer, self.requests = answer, []

    def get(self, request, retry=None, timeout=None):
        self.requests.append((request, retry, timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def operation(status, code=None):
    from types import SimpleNamespace

    error = SimpleNamespace(errors=[SimpleNamespace(code=code, message="no")]) if code else None
    return SimpleNamespace(name="op-1", status=status, error=error)


@pytest.mark.parametrize("answered, read, fails", [
    (operation("RUNNING"), operation("RUNNING"), False),  # read once, no error yet: done with it
    (operation("RUNNING"), operation("RUNNING", "RESOURCE_NOT_READY"), True),  # the error, read at once
    (operation("RUNNING"), TimeoutError("read timed out"), True),  # could not be read
    (operation(compute_v1.Operation.Status.DONE, "RESOURCE_NOT_READY"), None, True),  # the answer says it: no read
])
def test_an_error_an_operation_reports_at_once_fails_the_write_which_never_waits(answered, read, fails):
    from types import SimpleNamespace

    operations = Operations(read)
    migs = SimpleNamespace(resize_unary=lambda **request: answered, get=lambda **request: SimpleNamespace(target_size=0))
    mig = MigManager(PROJECT, REGION, MIG, migs, operations, call_bound_s=0.5)
    if fails:
        with pytest.raises(MigApiError):
            mig.resize(1)
    else:
        mig.resize(1)
    assert [(r["operation"], retry, timeout) for r, retry, timeout in operations.requests] == \
        ([] if read is None else [("op-1", None, 0.5)])  # at most one get, no wait, bounded


def test_every_call_in_a_region_answering_503_fails_within_its_bound(cloud):
    """google-cloud-compute's defaults retried a 503 for 600 s (get, list, listErrors) and gave every
    call 600 s: one region's outage held the tick for ten minutes. Each call now has the bound in all."""
    import time

    standin, _ = cloud(faults={"unavailable": [{"region": REGION}]})
    mig = MigManager(PROJECT, REGION, MIG, *compute_clients_from_env(), call_bound_s=0.5)
    calls = {"get": mig.target_size, "listManagedInstances": mig.instances, "listErrors": mig.errors,
             "list": mig.region_summaries, "resize": lambda: mig.resize(1),
             "deleteInstances": lambda: mig.delete_instances(["vm"], {"vm": f"{REGION}-a"})}
    for name, call in calls.items():
        refused, began = standin.outages.refused, time.monotonic()
        with pytest.raises(MigApiError):
            call()
        assert time.monotonic() - began < 3, name  # the bound (0.5 s) and one last request
        assert standin.outages.refused - refused >= 2, name  # a 5xx is retried within the bound
