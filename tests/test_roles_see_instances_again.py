"""see_mig_instances updates mig_instances.model (a VM recreated under the same name: migration 0048), so the roles of
the functions that run scaling passes (zen_ticker, and zen_submitter and zen_heartbeat, whose passes scale too) may
update it: granted UPDATE on last_seen_at, running_at and billed_before only, every pass was refused once an
instance was seen again (no VM added, none deleted)."""

from __future__ import annotations

import os

import pytest

from tests.role_support import login_as
from zen.store import fleet
from zen.store.db import Database


@pytest.mark.parametrize("role", ["zen_ticker", "zen_submitter", "zen_heartbeat"])
def test_a_role_sees_an_instance_again(role, db, db_target, clock):
    with login_as(db, db_target, role, f"{role}_seen_{os.getpid()}") as target:
        pool = Database.from_target(target)
        try:
            with pool.transaction() as session:  # first sight: an INSERT, granted
                fleet.see_instances(session, "c", "us-central1", ["vm-x"], clock(), model="spot")
            clock.advance(60)
            with pool.transaction() as session:  # seen again: ON CONFLICT DO UPDATE ... SET model = ...
                fleet.see_instances(session, "c", "us-central1", ["vm-x"], clock(), model="spot")
        finally:
            pool.close()
