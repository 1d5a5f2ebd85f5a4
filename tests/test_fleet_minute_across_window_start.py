"""GCE bills a VM a one-minute minimum, then per second. ``zen usage --by region`` charges that minute in the window
where the VM's RUNNING began; a VM that began before the window was charged its seconds in the window on top, though
the minute already paid for them: a VM RUNNING 20 s before the window and 80 s in it cost GCE 100 s, but the earlier
window's 60 s and this one's 80 s added up to 140. The window bears what its seconds add to the VM's bill."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.test_fleet_priced_as_it_ran import CLUSTER, one_vm_running
from zen.cli import main as cli
from zen.core.prices import Price, PriceTable
from zen.store import prices

VM = f"zen-{CLUSTER}-us-central1-cd34"
USD = 3600.0  # per VM-hour: a dollar a second


def _fleet_usd(capsys, since) -> float:
    assert cli.main(["usage", "--since", since.isoformat(), "--by", "region", "--json"]) == 0
    return {g["region"]: g for g in json.loads(capsys.readouterr().out)["groups"]}["us-central1"]["fleet_usd"]


def test_a_window_bears_only_what_its_seconds_add_to_the_minute_paid_before_it(config, db, db_url, clock, capsys,
                                                                               monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    start = clock()
    with db.transaction() as session:
        prices.store(session, PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(USD, "catalog", start)}),
                     start)
    scaler = one_vm_running(config, db, clock, VM)
    scaler.scale(CLUSTER)  # RUNNING from here
    clock.advance(20)
    scaler.scale(CLUSTER)  # the window below starts here: 20 s of the minute paid before it
    clock.advance(20)
    scaler.scale(CLUSTER)  # 40 s: still within the minute
    assert _fleet_usd(capsys, start - timedelta(hours=1)) == 60.0  # the whole run: GCE's minute
    assert _fleet_usd(capsys, start + timedelta(seconds=20)) == 0.0  # the minute, paid where it began, covers them

    clock.advance(60)
    scaler.scale(CLUSTER)  # 100 s in all: 40 s past the minute
    assert _fleet_usd(capsys, start - timedelta(hours=1)) == 100.0
    assert _fleet_usd(capsys, start + timedelta(seconds=20)) == 40.0  # 100 s billed less the 60 s before: not 80.0
