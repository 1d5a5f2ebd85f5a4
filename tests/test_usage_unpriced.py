"""What ``zen usage`` prints where something has no price. A cluster removed from the configuration still cost
what GCE billed for its VMs: its fleet VMs are priced from the machine type its attempts recorded, and where
nothing says which machine type they were, the region's and the total's fleet dollars are a lower bound that
names the VM-hours left unpriced and why, not "unpriced" with advice no one can follow. The note advises a
``pricing.overrides`` entry only for what such an entry would price, naming it; for the rest it says why no
price set now would apply."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from tests.messages import agent_run, heartbeat, job_request
from tests.test_usage_unpriced_kept import SPOT_VM, STANDARD_VM, run_gang_for_an_hour
from zen.cli import main as cli
from zen.core.config import ZenConfig

CLUSTER = "4xa100-40gb"  # a2-highgpu-4g in us-central1 and more; 1xl4 stays configured
PRICE = 14.69354  # the snapshot's a2-highgpu-4g in us-central1, standard, per VM-hour
L4_EUROPE = 0.897202  # the snapshot's g2-standard-8 in europe-west4, standard


def _without_cluster(config) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    raw["clusters"] = [c for c in raw["clusters"] if c["name"] != CLUSTER]
    raw["pricing"]["overrides"] = {}  # an override for a machine type no cluster has is refused
    return ZenConfig.model_validate(raw)


def _usage(monkeypatch, capsys, cfg: ZenConfig, *args: str) -> str:
    """``zen usage`` as a user runs it, under ``cfg``: what it prints."""
    monkeypatch.setattr("zen.core.config.load_config", lambda *a, **k: cfg)
    assert cli.main(["usage", *args]) == 0
    return capsys.readouterr().out


def _row(out: str, first: str) -> list[str]:
    """The printed table's row whose first cell is ``first``, split into its cells (two spaces or more apart)."""
    [line] = [line for line in out.splitlines() if line.split(" ", 1)[0] == first]
    return re.split(r"\s{2,}", line.strip())


def _see(zen, clock, pools: dict[str, dict[str, list[str]]], hours: float) -> None:
    """The scaling passes see ``pools`` (cluster -> region -> VM names) now and ``hours`` later."""
    from zen.scaling.fleetdb import FleetDb

    fleetdb = FleetDb(zen.db, {c.name: c for c in zen.config.clusters})
    start = clock()
    for at in (start, start + timedelta(hours=hours)):
        for cluster, instances in pools.items():
            fleetdb.see_instances(cluster, instances, at)


def test_the_fleet_of_a_removed_cluster_is_priced_at_the_machine_type_its_attempts_recorded(
        functions, zen, config, clock, monkeypatch, capsys):
    """Two VMs of the cluster an hour each, one of them running a job, then the cluster removed: the region's
    and the total's fleet dollars were "unpriced" and the note said "(unknown) in us-central1 (model unknown:
    cluster 4xa100-40gb is not configured): set pricing.overrides". The job's attempt recorded the machine
    type (a2-highgpu-4g) and the passes each VM's model (standard): both VMs are priced at the snapshot's."""
    _see(zen, clock, {CLUSTER: {"us-central1": ["vm-a", "vm-idle"]}, "1xl4": {"europe-west4": ["vm-l4"]}}, 1)
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(300)

    out = _usage(monkeypatch, capsys, _without_cluster(config), "--since", "2025-12-01", "--by", "region")
    fleet = round(2 * PRICE, 2)
    assert _row(out, "us-central1")[-2:] == ["2.0", f"{fleet}"], out
    assert _row(out, "TOTAL")[-2:] == ["3.0", f"{round(2 * PRICE + L4_EUROPE, 2)}"], out
    assert "unpriced" not in out and "no price" not in out, out


def test_a_removed_clusters_vms_nothing_prices_leave_a_lower_bound_and_say_why(
        functions, zen, config, clock, monkeypatch, capsys):
    """A removed cluster's idle VM, with no attempt in the window to say its machine type: the region's and the
    total's fleet dollars are what the priced VMs cost plus the VM-hours unpriced, and the note says why and what
    would price them (a window that takes in one of the cluster's attempts), not to set an override for a machine
    type it calls "(unknown)"."""
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1", vm="vm-a"):
        functions.heartbeat(beat)
    clock.advance(3600)
    since = clock().isoformat()  # after the job's end
    clock.advance(60)
    _see(zen, clock, {CLUSTER: {"us-central1": ["vm-idle"]}, "1xl4": {"europe-west4": ["vm-l4"]}}, 1)
    without = _without_cluster(config)

    out = _usage(monkeypatch, capsys, without, "--since", since, "--by", "region")
    assert _row(out, "us-central1")[-2:] == ["1.0", "0.00 + 1.0 VM-h unpriced"], out
    assert _row(out, "europe-west4")[-2:] == ["1.0", f"{round(L4_EUROPE, 2)}"], out
    assert _row(out, "TOTAL")[-2:] == ["2.0", f"{L4_EUROPE:.2f} + 1.0 VM-h unpriced"], out
    assert ("no price for VMs of cluster 4xa100-40gb in us-central1: the cluster was removed from the "
            "configuration and no attempt of it that ended in the window recorded its machine type; a --since "
            "that takes in one of its attempts prices them") in out, out
    assert "pricing.overrides" not in out and "(unknown)" not in out, out

    report = json.loads(_usage(monkeypatch, capsys, without, "--since", since, "--by", "region", "--json"))
    assert {k: report["total"][k] for k in report["total"] if k.startswith("fleet")} == {
        "fleet_vm_hours": 2.0, "fleet_usd": None, "fleet_usd_at_least": round(L4_EUROPE, 2),
        "fleet_unpriced_vm_hours": 1.0}

    out = _usage(monkeypatch, capsys, without, "--since", "2025-12-01", "--by", "region")  # the job's end in it
    assert _row(out, "TOTAL")[-1] == f"{round(PRICE + L4_EUROPE, 2)}" and "unpriced" not in out, out


def _unpriced_spot(config) -> ZenConfig:
    """The cluster on a machine type neither the snapshot nor the catalog prices, standard and spot, with an
    override for standard only."""
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(machine_type="n1-standard-32", gpu_type="nvidia-tesla-v100", provisioning=["standard", "spot"])
    raw["pricing"] = {"overrides": {"n1-standard-32": {"us-central1": {"standard": 10.0}}}}
    return ZenConfig.model_validate(raw)


@pytest.fixture
def spotless(config, db, publisher, clock):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    cfg = _unpriced_spot(config)
    zen = Zen(cfg, db, publisher, clock)
    return cfg, zen, FunctionsInvoker(zen)


def _note(out: str, item: str) -> str:
    [line] = [line for line in out.splitlines() if line.startswith("no price for") and item in line]
    return line


def test_the_note_advises_an_override_only_where_one_would_price_the_attempt(
        spotless, db, publisher, db_url, clock, monkeypatch, capsys):
    """Three unpriced attempts: one on the spot VM of a machine type with no spot price (an override prices
    it), a multi-node one whose spot node had none when it ended (its price was not kept, and which model each
    node ran as is not recorded), and one that ended while its cluster was removed (no machine type recorded).
    The note advised pricing.overrides for all three; an override prices the first alone."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    cfg, _, functions = spotless
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("solo"))
    functions.submit(job_request("gang", nodes=2))
    functions.heartbeat(heartbeat("solo", "CLAIMED", 1, vm=SPOT_VM))
    functions.heartbeat(heartbeat("solo", "RUNNING", 2, vm=SPOT_VM))
    clock.advance(3600)
    functions.heartbeat(heartbeat("solo", "SUCCEEDED", 3, vm=SPOT_VM, exit_code=0))
    run_gang_for_an_hour(functions, clock, "gang")
    functions.submit(job_request("cut"))
    functions.heartbeat(heartbeat("cut", "CLAIMED", 1, vm=STANDARD_VM))
    functions.heartbeat(heartbeat("cut", "RUNNING", 2, vm=STANDARD_VM))
    clock.advance(600)
    removed = FunctionsInvoker(Zen(_without_cluster(cfg), db, publisher, clock))
    removed.heartbeat(heartbeat("cut", "SUCCEEDED", 3, vm=STANDARD_VM, exit_code=0))

    out = _usage(monkeypatch, capsys, cfg, "--since", "2025-12-01")
    assert _note(out, "n1-standard-32 in us-central1 (spot)") == (
        "no price for n1-standard-32 in us-central1 (spot): set pricing.overrides.n1-standard-32.us-central1.spot "
        "(USD per VM-hour; docs/reference/configuration.md#prices)"), out
    gang = _note(out, "multi-node")
    cut = _note(out, "an attempt of cluster 4xa100-40gb")
    assert gang == ("no price for n1-standard-32 in us-central1 (a multi-node attempt's nodes as spot+standard): "
                    "no price was known for one of its nodes' models when it ended, and which model each "
                    "node ran as is not recorded, so no price set now applies to it"), out
    assert cut == ("no price for an attempt of cluster 4xa100-40gb in us-central1: it ended while its cluster was not "
                   "configured, so neither its machine type nor its price was recorded; rename or remove a cluster "
                   "only while no job runs on it"), out
    assert out.count("pricing.overrides") == 1, out

    raw = json.loads(cfg.model_dump_json())  # the advice followed: the solo attempt is priced, the others not
    raw["pricing"]["overrides"]["n1-standard-32"]["us-central1"]["spot"] = 3.0
    out = _usage(monkeypatch, capsys, ZenConfig.model_validate(raw), "--since", "2025-12-01")
    assert "n1-standard-32 in us-central1 (spot)" not in out and "pricing.overrides" not in out, out
    assert _note(out, "multi-node") == gang and _note(out, "an attempt of cluster") == cut, out


def test_no_override_is_advised_for_a_machine_type_no_configured_cluster_has(
        spotless, db_url, clock, monkeypatch, capsys):
    """A spot VM of a machine type with no spot price, its cluster since removed: the attempt it ran recorded
    its machine type and model, but pricing.overrides refuses a machine type no cluster has, so the note says
    so instead of advising one; the VM's hour is the region's fleet dollars left unpriced."""
    cfg, zen, functions = spotless
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    _see(zen, clock, {CLUSTER: {"us-central1/spot": [SPOT_VM]}}, 1)
    functions.submit(job_request("solo"))
    for beat in agent_run("solo", vm=SPOT_VM):
        functions.heartbeat(beat)

    out = _usage(monkeypatch, capsys, _without_cluster(cfg), "--since", "2025-12-01", "--by", "region")
    assert _row(out, "us-central1")[-1] == "0.00 + 1.0 VM-h unpriced", out
    assert _note(out, "n1-standard-32") == (
        "no price for n1-standard-32 in us-central1 (spot): no configured cluster has n1-standard-32 in "
        "us-central1, and pricing.overrides takes only configured clusters' machine types and regions"), out
    assert "pricing.overrides." not in out, out
