"""An instance's first scaling passes at once (a function instance serves 4 requests; a hedged burst
of VMs booting together sends their first IDLE heartbeats together): the Compute clients and each
cluster's manager are built once, not once per request (a review found the clients built twice, and
every later pass of the instance failing with a TypeError)."""

from __future__ import annotations

import threading
import time


def test_concurrent_first_passes_build_the_compute_clients_and_each_manager_once(db_url, monkeypatch):
    import zen.adapters.compute as mig
    from zen.app import Zen

    for name, value in {"ZEN_DATABASE_URL": db_url, "ZEN_COMPUTE_ENDPOINT": "127.0.0.1:9",
                        "PUBSUB_EMULATOR_HOST": "127.0.0.1:9", "ZEN_PROJECT": "p", "ZEN_SCALING": "on"}.items():
        monkeypatch.setenv(name, value)
    real, built = mig.compute_clients_from_env, []

    def slow():  # building the clients takes a while (credentials, transports): long enough to overlap
        time.sleep(0.2)
        built.append(1)
        return real()

    monkeypatch.setattr(mig, "compute_clients_from_env", slow)
    zen = Zen.from_env()
    clusters = [c.name for c in zen.config.clusters][:2]
    start, managers, errors = threading.Barrier(4), [], []

    def first_pass(cluster: str) -> None:
        start.wait()
        try:
            managers.append((cluster, zen.scaler.manager(cluster)))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            errors.append(exc)

    threads = [threading.Thread(target=first_pass, args=(c,)) for c in clusters * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors and len(built) == 1
    assert all(manager is zen.scaler.manager(cluster) for cluster, manager in managers)
    assert zen.scaler.manager(zen.config.clusters[-1].name)  # a later cluster's manager is built as well


def test_a_vm_usable_calls_for_a_pass_only_while_boots_are_in_flight(config, db, publisher, clock):
    """A VM of a cluster that became usable runs a pass at once only while the cluster's last pass
    left VMs booting (hedges it may have beaten), or when no pass of it is known in this instance:
    otherwise every job's end would read every MIG of its cluster."""
    from tests.messages import job_request
    from tests.scaling.fakes import RecordingMig
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker
    from zen.scaling.manager import ClusterOrchestrator

    calls: list = []
    scaler = ClusterOrchestrator(config, db, clock, lambda project, region, name, model: RecordingMig(region, calls))
    zen = Zen(config, db, publisher, clock, scaler=scaler)
    cluster = "4xa100-40gb"
    assert scaler.racing(cluster)  # nothing known yet: a pass
    scaler.scale(cluster)  # nothing queued, nothing booting
    assert not scaler.racing(cluster)
    FunctionsInvoker(zen).submit(job_request("j1"))  # new demand: its pass asks for a VM (and a hedge)
    assert any(call[0] == "resize" for call in calls)
    assert scaler.racing(cluster)
    zen.relay.marks.flush()

