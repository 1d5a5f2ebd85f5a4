"""`zen explain` of a job whose start went first to the regions of warm VMs offered other jobs already
(zen.core.routing.first_route) says where the next tick widens it: it said "to every allowed region", while the
tick widens it to the warm VMs' regions and its data's only (zen.core.routing.next_route), every allowed region
one data_wait_s later."""

from __future__ import annotations

import json

from tests.messages import job_request
from tests.test_routing import DATA, get, history, reach, routed, vm_heartbeat  # noqa: F401 (fixture)


def test_explain_of_a_start_sent_to_warm_regions_names_the_next_widening_truthfully(routed, publisher, clock,
                                                                                     tmp_path, monkeypatch, capsys):
    import yaml

    from zen.cli.queues import explain_job

    zen, functions = routed
    functions.heartbeat(vm_heartbeat("vm-warm", "us-west1", 1, cached_inputs=["gs://eu-data/shards/"]))
    functions.submit(job_request("b1", inputs=DATA))  # offered to vm-warm
    functions.submit(job_request("b2", inputs=DATA))  # vm-warm is offered b1: b2 goes to us-west1 first
    assert history(zen, "b2")[-1][2] == ("admitted; start sent to us-west1 first, whose idle VMs hold its inputs; "
                                         "widened after 30 s unclaimed")
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(zen.config.model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert explain_job("b2", False, zen.db) == 0
    said = capsys.readouterr().out

    clock.advance(60)
    functions.tick()  # what the tick really does with b2's start
    b2_starts = [m for m in publisher.on("zen-job-start") if json.loads(m.data)["job_id"] == "b2"]
    widened = reach(b2_starts[-1])
    assert widened == {"allow_us_west1", "allow_europe_west4"}  # not every allowed region (us-central1 left out)
    assert get(zen, "b2").start_regions == ["europe-west4", "us-west1"]

    # What explain said would happen at that tick must match it.
    assert "to every allowed region at the first tick after" not in said, said
