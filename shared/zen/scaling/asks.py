"""Passes asked for while another pass held the cluster: ``PassAsksDb``, the production ``PassAsks``.

A pass that finds its cluster's lock held does not wait (a Cloud Function must never sleep, nor hold
a lock while idle): it counts an ask in ``scaling_pass_asks`` and tries the lock once more. The pass
that held it reads the count before its snapshot and again once it let go of the lock; if the count
moved, a job may have arrived after its snapshot, and it runs again (``ClusterManager.run``, a
bounded number of times). Reading after the unlock closes the race: an ask counted before that read
is seen by the holder; one counted after it is followed by the asker's own second try of the lock,
which then finds it free (or held by a pass that began after the ask, whose snapshot has the job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zen.scaling.port import PassAsks

if TYPE_CHECKING:
    from zen.store.db import Database


class PassAsksDb:
    def __init__(self, db: Database):
        self._db = db

    def ask(self, cluster: str) -> int:
        """Count one ask for a pass of ``cluster``; returns the new count."""
        with self._db.transaction() as session:
            row = session.one("ask_scaling_pass", cluster=cluster)
        assert row is not None, "the upsert returns its row"
        return int(row["asks"])

    def asked(self, cluster: str) -> int:
        """How many passes of ``cluster`` were asked for so far."""
        with self._db.transaction() as session:
            row = session.one("scaling_pass_asks", cluster=cluster)
        return 0 if row is None else int(row["asks"])


_ADAPTS: type[PassAsks] = PassAsksDb  # the type checker holds the adapter to its port
