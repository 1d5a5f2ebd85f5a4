"""The VM heartbeat's handling (``JobService.vm_beats``): record what the VM says about itself, and
requeue at once the attempts it says it gave back with their claim unanswered
(``zen.core.lifecycle.decide_given_back`` says when that is safe), all in one transaction.

Why: docs/explanations/delivery-guarantees.md, "A claim answered too late".
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from zen.core import gang
from zen.core.clock import Clock
from zen.core.config import ZenConfig
from zen.core.models import VmState
from zen.core.vm_heartbeat import VmHeartbeat, VmUp
from zen.jobs.decisions import DecisionWriter, frees_quota
from zen.jobs.messaging import OutboxRelay
from zen.jobs.outgoing import Enqueued

if TYPE_CHECKING:
    from zen.jobs.store import JobStore, JobTx

log = logging.getLogger("zen.jobs.service")


class VmBeats:
    def __init__(self, store: JobStore, config: ZenConfig, clock: Clock, relay: OutboxRelay, decisions: DecisionWriter):
        self._store = store
        self._config = config
        self._clock = clock
        self._relay = relay
        self._decisions = decisions

    def refusal(self, hb: VmHeartbeat | VmUp, names_proven: bool) -> str | None:
        """Why a VM heartbeat (or a VM's first word) is refused, or None. Its cluster must be known and use its region; and
        where VMs prove their names (``names_proven``, ``ZEN_VM_PROOF=required``: ``zen.adapters.vm_proof``), the VM must be an
        instance of that cluster's MIG in that region (GCE names them ``<MIG>-<suffix>``). The token
        proves the VM, not the cluster it names: without this, a VM could report as an idle VM of
        another cluster in its region, which that cluster's planner would count as supply, and make
        that cluster's scaling passes run (``Zen.on_heartbeat``)."""
        cluster = self._config.cluster(hb.cluster)
        if cluster is None:
            return f"unknown cluster {hb.cluster!r}"
        if hb.region not in cluster.regions:  # a VM Zen never scales for: no MIG, no start subscription of it
            return (f"VM {hb.vm} in region {hb.region!r}: cluster {hb.cluster} does not use that region "
                    f"(its regions: {cluster.regions})")
        if names_proven and not cluster.has_instance(hb.vm, hb.region):
            migs = ", ".join(cluster.mig_name(hb.region, m) for m in cluster.provisioning)
            return (f"VM {hb.vm} is not an instance of cluster {hb.cluster}'s MIGs in {hb.region} ({migs}): a VM "
                    "reports for its own cluster")
        return None

    def record_vm(self, hb: VmHeartbeat, created: datetime | None = None) -> tuple[bool, bool]:
        """Record a VM heartbeat of a known cluster and requeue what it gave back: whether it changed
        anything (not when older than the last one recorded and nothing to requeue), and whether the VM
        became usable (IDLE, from booting or from running a job: ``Zen.on_heartbeat`` runs a pass). ``created``:
        the VM's creation time, its token's (``zen.core.incarnation``): a RETIRED is kept for that VM
        (``JobTx.vm_retired_before``: a claim of its is refused)."""
        with self._store.transaction() as tx:
            was = tx.upsert_vm(
                name=hb.vm, cluster=hb.cluster, region=hb.region, zone=hb.zone, state=hb.state.value,
                job_id=hb.job_id, attempt=hb.attempt, seq=hb.seq, now=(now := self._clock()),
                # Idle since: never later than now (a clock ahead), nor more than one VM heartbeat period before it
                # (a clock behind: a VM says IDLE that often, so Zen heard one that old at the latest).
                sent_at=min(max(hb.sent_at, now - timedelta(seconds=self._config.deadlines.vm_heartbeat_s)), now),
                heard_at=min(hb.sent_at, now),  # an older seq sent now (a clock stepped back) still heard
                jobs=None if hb.jobs is None else [held.model_dump() for held in hb.jobs],
                cached_inputs=hb.cached_inputs, images=hb.images, created=created,
            )
            # Whether or not the row took it (it may be older than the last one recorded): the list is
            # judged against each job's own reports.
            ids = self._requeue_given_back(tx, hb)
            self.outside_mig(tx, hb)
        self._relay.flush_quietly(ids)
        usable = hb.state is VmState.IDLE and was is not None and was != VmState.IDLE.value
        return was is not None or bool(ids), usable

    def outside_mig(self, tx: JobTx, hb: VmHeartbeat) -> None:
        """Log at ERROR a VM heard from outside its MIG: sent a VM heartbeat period (clocks apart, a word sent as it went)
        after a scaling pass saw it leave its MIG, and listed by none since (``abandonInstances``, by hand or a tool).
        No pass lists it, so none deletes it; its claims are refused (``vm_is_draining``) and its agent retires: it
        runs idle, billed, until someone deletes it. Logged at each such heartbeat (a minute apart), until it is gone.
        Not a STOPPING: its VM is going away (a dropped pool's VMs, forgotten unseen, ``Zen._dropped`` tells)."""
        if hb.state is VmState.STOPPING:
            return
        margin = timedelta(seconds=self._config.deadlines.vm_heartbeat_s)
        if (gone := tx.vm_outside_mig(hb.vm, hb.sent_at - margin)) is None:
            return
        left_at, usd = gone
        price = "at its machine type's price" if usd is None else f"${usd:.2f} an hour"
        log.error(f"VM {hb.vm} runs outside its MIG: a scaling pass saw it leave the MIG at {left_at.isoformat()}, and "
                  f"it says {hb.state.value}. No pass deletes it and it takes no job; billed {price} until deleted: "
                  f"gcloud compute instances delete {hb.vm} --zone {hb.zone} --project {self._config.project}", extra={
                      "cluster": hb.cluster, "region": hb.region, "zone": hb.zone, "vm": hb.vm, "state": hb.state.value,
                      "left_mig_at": left_at.isoformat(), "usd_per_hour": usd})

    def _requeue_given_back(self, tx: JobTx, hb: VmHeartbeat) -> list[Enqueued]:
        """Requeue (or end, stopped) each attempt ``hb`` names that ``gang.decide_given_back`` says may go. Every such
        job is locked first, in job id order, and with more than one admission pass to follow (the queues of those
        whose end or preemption frees quota), their queues' locks too (``DecisionWriter.lock_passes``), before any is
        applied: taking one job's row, then its queue's lock (the pass after its end), then the next job's row, it
        waited for that job's own final report (or the tick's sweep ending it), which held its row and waited for
        the same queue's lock (Postgres failed one of the two: a 500, the message delivered again later)."""
        named = sorted({(held.job_id, held.attempt) for held in hb.given_back or ()})
        # Decided first unlocked: most name a race another VM won, or a job over (no lock taken for those: won by
        # a late claim meanwhile, its next heartbeat says).
        due = [(job_id, attempt) for job_id, attempt in named if (seen := tx.get_job(job_id)) is not None
               and gang.decide_given_back(seen, hb.vm, attempt, hb.seq, self._clock()) is not None]
        passes: set[tuple[str, str]] = set()
        for job_id, attempt in due:
            job = tx.get_job(job_id, lock=True)
            decision = gang.decide_given_back(job, hb.vm, attempt, hb.seq, self._clock()) if job else None
            if job is not None and decision is not None and job.queue and self._decisions.queued and frees_quota(
                    job.status, decision.changes[-1].to if decision.changes else job.status):
                passes.add((job.queue, job.cluster))
        if len(passes) > 1:
            self._decisions.lock_passes(tx, sorted(passes))
        ids: list[Enqueued] = []
        for job_id, attempt in due:  # read again: an earlier one's pass may have moved it (preempted)
            job = tx.get_job(job_id, lock=True)
            decision = gang.decide_given_back(job, hb.vm, attempt, hb.seq, self._clock()) if job else None
            if job is None or decision is None:
                continue
            log.warning("claim given back: job requeued", extra={
                "job_id": job_id, "attempt": attempt, "vm": hb.vm, "seq": hb.seq, "claim_seq": job.last_seq})
            ids += self._decisions.apply(tx, job, decision, actor=f"vm:{hb.vm}", now=self._clock())
        return ids
