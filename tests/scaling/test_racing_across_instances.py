"""The heartbeat function runs a pass when a VM becomes usable while the cluster's last pass left VMs booting
(``Zen.on_heartbeat``, ``ClusterOrchestrator.racing``). It read only the passes its own instance ran: in
production submissions and the tick run in other Cloud Functions, and once a heartbeat instance's own pass left
nothing booting, the losing boots of every later race (hedges, spare boots) ran on, billed, until the next
tick. Two ``Zen`` instances on one database and one Compute stand-in."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen_dev.local.invoke import FunctionsInvoker


class Instance:
    """One Cloud Function instance: its own ``Zen`` (and orchestrator), called as functions-framework would."""

    def __init__(self, zen: Zen, events: FunctionsInvoker):
        self.zen, self._events = zen, events

    def submit(self, payload):
        ev = self._events.event("on_job_submitted", payload)
        self.zen.on_job_submitted(ev["id"], ev["type"], ev["data"])

    def heartbeat(self, payload):
        ev = self._events.event("on_heartbeat", payload)
        self.zen.on_heartbeat(ev["id"], ev["type"], ev["data"])


def test_a_heartbeat_instance_ends_a_race_another_instance_started(config, db, publisher, clock, monkeypatch,
                                                                     tmp_path):
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        events = FunctionsInvoker(zen)
        submissions = Instance(zen, events)  # the on_job_submitted function's instance (and the tick's)
        clients = compute_clients_from_env()
        beats = Instance(Zen(config, db, publisher, clock, scaler=ClusterOrchestrator(  # on_heartbeat's instance
            config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))), events)
        regions = ["us-west1", "europe-west4"]

        # A first job: asked in us-west1, hedged in europe-west4 (never seen to deliver).
        submissions.submit(job_request("a", regions=regions))
        assert len(instances("us-west1")) == 1 and len(instances("europe-west4")) == 1
        advance(BOOT_S + 1)
        [west] = instances("us-west1")
        beats.heartbeat(vm_beat(west.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))  # the heartbeat instance's first pass
        assert instances("europe-west4") == []  # the hedge lost the race: ended at once. Good.
        beats.heartbeat(heartbeat("a", "CLAIMED", 1, vm=west.name, region="us-west1", zone=west.zone))
        beats.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=west.name, region="us-west1", zone=west.zone, exit_code=0))
        beats.heartbeat(vm_beat(west.name, "us-west1", "IDLE", 2, sent_at=clock().isoformat()))
        advance(zen.config.deadlines.idle_timeout_s + 1)
        zen.scaler.tick()  # the tick function: the idle VM goes
        assert instances("us-west1") == []

        # A second job, the same race: asked in us-west1 and hedged in europe-west4 by the submission's pass.
        submissions.submit(job_request("b", regions=regions))
        assert len(instances("us-west1")) == 1 and len(instances("europe-west4")) == 1
        advance(BOOT_S + 1)
        [west] = instances("us-west1")
        beats.heartbeat(vm_beat(west.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))  # the winner is usable
        # As for the first job, the hedge that lost the race should be ended now, not billed until the next
        # tick; the heartbeat instance's view (its own last pass, which left nothing booting) says no race.
        assert instances("europe-west4") == [], "the losing hedge keeps running (billed) until the next tick"
    finally:
        standin.stop()
