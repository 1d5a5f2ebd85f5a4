"""The composition root: builds Zen's parts once per process and exposes one method per function.

``functions/main.py`` holds one lazily built ``Zen`` per function instance; tests and the local stack
build their own with ``Zen.build(...)``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterator, Protocol

from zen import telemetry
from zen.adapters.control_subscriptions import CONTROL_TTL
from zen.adapters.pubsub import PubSubPublisher
from zen.core.clock import Clock, utc_now
from zen.core.config import ZenConfig, load_config
from zen.core.errors import DataRejected, Rejected, TransientError
from zen.core.events import PubSubEnvelope, envelope_from_cloud_event
from zen.core.prices import PriceTable, catalog_pairs
from zen.core.text import escape_unstorable
from zen.jobs.announce import RejectionEvent
from zen.jobs import probes
from zen.jobs.beside import SWEEP_BESIDE_S, sweeping_beside
from zen.jobs.messaging import OutboxRelay, Publisher
from zen.jobs.notifications import Notifier, NotifyOutcome
from zen.jobs.service import JobService, Outcome
from zen.store import fleet
from zen.store.db import Database
from zen.store.jobstore import PostgresJobStore
from zen.store.migrate import schema_lag

log = logging.getLogger("zen.app")
TICK_LOCK_KEY = 7_301_002  # arbitrary, fixed: one scale tick at a time


class Scaler(Protocol):
    """The scaling seam (``zen.scaling.manager.ClusterOrchestrator``)."""

    def tick(self) -> object: ...  # one pass over every cluster

    def scale(self, cluster: str) -> object: ...  # one cluster, right after a submission

    def covered(self, cluster: str, regions: tuple[str, ...] | None = None) -> bool:
        """Is one more job (allowing ``regions``) already provided for? Cheap: no database, no Compute."""

    def racing(self, cluster: str) -> bool:
        """Does a VM of ``cluster`` that became usable call for a pass now (boots in flight)? Cheap."""


class ControlMaker(Protocol):
    """Makes the VMs' control subscriptions (``zen.adapters.control_subscriptions.ControlSubscriptions``)."""

    # instances: (vm, cluster, pool)s; gone: the VMs a MIG listed in the last day and lists no more; left: of the
    # names it is given, those a scaling pass saw leave their MIG; returns how many were made now
    def ensure(self, instances, gone=None, left=None) -> int: ...


@dataclass
class TickReport:
    skipped: bool = False
    relayed: int = 0
    swept: int = 0
    republished: int = 0
    widened: int = 0  # starts narrowed near their data, now sent to every allowed region (zen.core.routing)
    admitted: int = 0
    stopped: int = 0  # stops that raced their job's submission, applied (zen.jobs.sweeps.apply_early_stops)
    pruned: int = 0  # rejected_messages rows past their retention, deleted (zen.store.rejections)
    controls: int = 0  # VMs' control subscriptions made and granted (zen.adapters.control_subscriptions)
    prices: str | None = None  # the catalog prices' refresh: fresh, refreshed, failed, waiting (zen.store.prices), none
    scaling: object | None = None
    cut: str | None = None  # the step a tick past its function's timeout stopped before (Zen.on_scale_tick)


class Zen:
    def __init__(self, config: ZenConfig, db: Database, publisher: Publisher, clock: Clock = utc_now,
                 scaler: Scaler | None = None, controls: ControlMaker | None = None,
                 price_fetch: Callable[[datetime], PriceTable] | None = None, notifier: Notifier | None = None,
                 timeout_s: float | None = None):
        self.config = config
        self.timeout_s = timeout_s  # the function's (ZEN_FUNCTION_TIMEOUT_S): a tick past it stops; None: never
        self.sweep_every_s = SWEEP_BESIDE_S  # the sweeps' period beside the tick's scaling step (zen.jobs.beside)
        self.db = db
        self.store = PostgresJobStore(db)  # the job service's port (zen.jobs.store) over Postgres
        self.clock = clock
        self.relay = OutboxRelay(self.store, publisher, clock,
                                 urgent=frozenset({config.topics.job_start, config.topics.vm_control}))
        self.jobs = JobService(self.store, config, self.relay, clock)
        self.scaler = scaler
        self.controls = controls  # None: the agents make their own control subscriptions
        self.price_fetch = price_fetch  # None: no catalog (the snapshot and the configuration price VMs)
        self._notifier = notifier
        self._schema_ok = False
        self._quiet = telemetry.Quiet()  # the tick's gauge lines: written on a change or activity (zen.telemetry)

    def _schema_ready(self) -> None:
        """Work only on a schema as new as this code (``zen.store.migrate``): checked until it holds,
        then never again in this instance (migrations only add, so it keeps holding)."""
        if self._schema_ok:
            return
        with self.db.session() as session:
            lag = schema_lag(session)
        if lag:
            raise TransientError(lag)  # 500: Pub/Sub redelivers once the schema is migrated
        self._schema_ok = True

    @classmethod
    def from_env(cls) -> "Zen":
        """Production wiring. ``ZEN_SCALING=off`` leaves scaling out (a stack without Compute)."""
        config = load_config()
        project = os.environ.get("ZEN_PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT") or config.project
        config = config.for_project(project)  # the secrets the notifier reads, that project's
        db = Database.from_env()
        scaler = None
        if os.environ.get("ZEN_SCALING", "on").lower() != "off":
            from zen.scaling.manager import ClusterOrchestrator
            from zen.adapters.compute import MigManager, compute_clients_from_env

            clients: list = []
            flex: list = []  # the resize-requests client, for flex-start pools only

            def mig_factory(p: str, region: str, name: str, model: str) -> MigManager:
                # Built on the first scaling pass, once per instance: called only while the orchestrator
                # builds a cluster's manager, under its lock (concurrent first passes build once).
                if not clients:
                    clients.extend(compute_clients_from_env())
                if model != "flex-start":
                    return MigManager(p, region, name, *clients)
                from zen.adapters.flex_start import FlexStartMig, resize_requests_client_from_env

                if not flex:
                    flex.append(resize_requests_client_from_env())
                cluster = next(c for c in config.clusters if c.mig_name(region, model) == name)
                return FlexStartMig(p, region, name, clients[0], clients[1], flex[0],
                                    run_s=cluster.flex_start_run_s)

            def prices() -> PriceTable:  # what the planner ranks pools by (zen.scaling.pricing), kept 10 min
                from zen.store.prices import current

                with db.transaction() as session:
                    return current(session, config.pricing)

            from zen.adapters.quotas import QuotaReader

            scaler = ClusterOrchestrator(config, db, utc_now, mig_factory, prices=prices,
                                         quotas=QuotaReader(project))  # its clients built at the tick's first read
        from zen.adapters.control_subscriptions import ControlSubscriptions, accounts_from_env

        controls = None
        if (accounts := accounts_from_env(os.environ)) is not None:  # set by terraform: per cluster and region
            controls = ControlSubscriptions(config, project, accounts)
        price_fetch = None
        if config.pricing.catalog and os.environ.get("ZEN_PRICES", "catalog").lower() != "snapshot":
            from zen.adapters.billing import catalog_fetcher

            price_fetch = catalog_fetcher(config.clusters)
        return cls(config, db, PubSubPublisher(project), scaler=scaler, controls=controls, price_fetch=price_fetch,
                   timeout_s=db.lock_hold_s)

    # -- one method per Cloud Function ---------------------------------------------------------
    # Each runs inside ``relay.request()``: the instance's last request in flight waits for the
    # urgent messages still being published (``zen.jobs.messaging``).
    def on_job_submitted(self, event_id: str, event_type: str | None, data) -> Outcome:
        with self.relay.request():
            outcome = self._with_envelope(self.config.topics.job_submitted, event_id, event_type, data,
                                          self.jobs.submit)
            if (outcome.result == "created" and outcome.admitted and outcome.cluster and self.scaler is not None
                    and (outcome.nodes > 1 or not self.scaler.covered(outcome.cluster, outcome.regions))):
                # New demand that no spare VM covers: scale now rather than at the next tick (which
                # also runs it; a pass already under way for this cluster makes this one skip). A job
                # left PENDING by its queue is no demand yet: the pass that admits it is the tick's.
                self.scaler.scale(outcome.cluster)
            return outcome

    def on_heartbeat(self, event_id: str, event_type: str | None, data) -> Outcome:
        with self.relay.request():
            outcome = self._with_envelope(self.config.topics.heartbeats, event_id, event_type, data, self._heartbeat)
            if outcome.cluster and self.scaler is not None and self.scaler.racing(outcome.cluster):
                # A VM said its first word (its guest is up: it is RUNNING in its MIG) or became usable
                # (booted, or idle after its job) while boots are in flight: a pass now deletes the boots
                # that lost the race to it, rather than at the next tick (the original system cancels
                # its extra boots the moment one VM is usable). docs/explanations/scaling.md.
                self.scaler.scale(outcome.cluster)
            return outcome

    def _heartbeat(self, envelope: PubSubEnvelope) -> Outcome:
        """``JobService.heartbeat``; once handled (not to be pushed again), its delivery lag noted if it came
        through late (``zen.jobs.probes.heard_late``: the lost-job sweep holds silences by it)."""
        got_at = self.clock()
        outcome = self.jobs.heartbeat(envelope)
        probes.heard_late(self.store, self.config, envelope.publish_time, got_at)
        return outcome

    def on_stop_requested(self, event_id: str, event_type: str | None, data) -> Outcome:
        with self.relay.request():
            return self._with_envelope(self.config.topics.job_stop, event_id, event_type, data, self.jobs.stop)

    def on_job_event(self, event_id: str, event_type: str | None, data) -> NotifyOutcome:
        """The notifier (``zen.jobs.notifications``): a ``zen-job-events`` message's notices. An envelope
        that cannot be read is logged and acked (never answered on zen-job-events, which it came from)."""
        self._schema_ready()
        try:
            envelope = envelope_from_cloud_event(event_id, event_type, data)
        except Rejected as rejection:
            log.error("a job event that cannot be read was skipped", extra={"reason": rejection.reason})
            return NotifyOutcome()
        return self.notifier.handle(envelope)

    @property
    def notifier(self) -> Notifier:
        """Built at the first event (its Secret Manager client at the first read): only the notifier's
        instances ever build one."""
        if self._notifier is None:
            from zen.adapters.webhooks import HttpPoster, notify_secret_reader
            from zen.store.notifications import PostgresNotifications

            self._notifier = Notifier(self.config, PostgresNotifications(self.db), notify_secret_reader(),
                                      HttpPoster(), self.clock, email_poster=HttpPoster(public_only=False),
                                      timeout_s=self.timeout_s)
        return self._notifier

    def _dropped(self, session: Any, cluster: str, pool: str, vms: list[str]) -> None:
        """Say that pool ``pool`` of ``cluster`` left the configuration, with the VMs its last pass listed: they are
        shown no more, but billed until terraform destroys its MIG (a failed or partial apply leaves them)."""
        if not vms:
            log.info(f"pool {pool} is no longer in the configuration: forgotten", extra={"cluster": cluster, "region": pool})
            return
        why = (f"pool {pool} is no longer in the configuration; its last pass listed {len(vms)} VM(s) ({', '.join(vms)}): "
               "shown no more, billed until terraform destroys its MIG (terraform apply)")
        fleet.add_scaling_decision(session, cluster=cluster, region=pool, action="HOLD", count=len(vms), vm=None,
                                   reason=why, now=self.clock())
        log.warning(why, extra={"cluster": cluster, "region": pool})

    def on_scale_tick(self) -> TickReport:
        """Resend the outbox, sweep lost jobs, republish and widen unclaimed starts, admit, narrow (or hold) queued
        jobs whose tags left their regions, prune old refusals, make the listed VMs' control subscriptions, scale
        (resending, sweeping lost jobs and republishing again every ``sweep_every_s`` beside it: ``zen.jobs.beside``),
        then widen again (gangs: the room the pass found) and make those of the VMs just listed. A second concurrent
        tick skips. A tick past its function's timeout (``timeout_s``) stops before its next step: Cloud Functions
        answered 504 and left it running, throttled, and Postgres has ended its lock's connection by then
        (``Database.session_lock``), so another tick may be running; the next one goes on."""
        self._schema_ready()  # else no sweep: a job's reports cannot be recorded meanwhile
        began = time.monotonic()
        with self.relay.request(), self.store.tick_lock(TICK_LOCK_KEY) as locked:
            if not locked:
                log.info("another scale tick holds the lock; skipping")
                return TickReport(skipped=True)
            report = TickReport()

            def past_timeout() -> bool:
                return self.timeout_s is not None and time.monotonic() - began > self.timeout_s

            for step in self._tick_steps(report, past_timeout):
                if past_timeout():
                    report.cut = step
                    log.warning(f"the scale tick ran past its function's timeout ({self.timeout_s:g} s): stopped "
                                f"before its {step} step; the next tick goes on", extra={"step": step})
                    return report
            telemetry.log_tick(log, self.db, [c.name for c in self.config.clusters], self.clock(), report,
                               self._quiet)
            return report

    def _tick_steps(self, report: TickReport, past_timeout: Callable[[], bool]) -> Iterator[str]:
        """The tick's steps, in order, into ``report``: each yields its name before it runs (the caller stops there
        past the timeout, ``past_timeout()``)."""
        yield "resend"
        report.relayed = self.relay.flush_pending()
        yield "lost-job sweep"
        report.swept = self.jobs.sweeps.sweep_lost()
        yield "early stops"
        report.stopped = self.jobs.sweeps.apply_early_stops()
        yield "republish"
        report.republished = self.jobs.sweeps.republish_unclaimed()
        report.widened = self.jobs.sweeps.widen_narrowed()
        yield "retries"
        self.jobs.sweeps.retry_due()  # before the admission passes, which then see what was let go
        self.jobs.sweeps.look_after()
        self.jobs.sweeps.let_go_arrays()
        yield "admission"
        report.admitted = self.jobs.sweeps.admit_waiting()
        # After every pass that makes a job QUEUED (retries, arrays, queues admit with the regions stored), before
        # the scaling pass counts it as demand where a tag it requires no longer is.
        self.jobs.sweeps.narrow_uncleared()
        yield "pruning"
        report.pruned = self.store.prune_rejections(self.clock())
        if self.controls is not None:  # the instances earlier passes listed: a scaling step past the timeout cut
            yield "control subscriptions"  # the one after it every tick, and no VM heard an order (its CONFIRM, STOP)
            report.controls = self._ensure_controls(self.controls)
        if self.scaler is not None:
            yield "scaling"
            with sweeping_beside(lambda: self._sweep_beside(report), self.sweep_every_s, past_timeout):
                report.scaling = self.scaler.tick()
            # Gangs again, with the room this pass found since their claims (zen.core.gang.room_seen_after):
            # the sweep above read the last tick's, which missed every claim made since.
            report.widened += self.jobs.sweeps.widen_narrowed()
            with self.db.transaction() as session:  # pools the configuration dropped: no pass lists them again
                for (cluster, pool), vms in fleet.forget_dropped_pools(
                        session, {c.name: c.pools() for c in self.config.clusters}).items():
                    self._dropped(session, cluster, pool, vms)
        if self.controls is not None and self.scaler is not None:  # the instances this pass just listed, booting too
            yield "new control subscriptions"
            report.controls += self._ensure_controls(self.controls)
        if self.price_fetch is not None:  # once a day; else one cheap query
            yield "prices"
            report.prices = self._refresh_prices(self.price_fetch)
        yield "final resend"
        report.relayed += self.relay.flush_pending()

    def _sweep_beside(self, report: TickReport) -> None:
        """The steps the scaling step must not hold back (``zen.jobs.beside``): resend, lost-job sweep (its probe
        too), early stops, republish."""
        report.relayed += self.relay.flush_pending()
        report.swept += self.jobs.sweeps.sweep_lost()
        report.stopped += self.jobs.sweeps.apply_early_stops()
        report.republished += self.jobs.sweeps.republish_unclaimed()

    def _ensure_controls(self, controls: ControlMaker) -> int:
        """The control subscriptions of the instances the scaling passes listed, made where not yet."""
        with self.db.transaction() as instances:
            return controls.ensure(fleet.mig_instance_names(instances),
                                   lambda: fleet.vms_gone_since(instances, self.clock() - CONTROL_TTL),
                                   lambda names: fleet.vms_seen_leaving(instances, names))

    def _refresh_prices(self, fetch: Callable[[datetime], PriceTable]) -> str:
        """The catalog's prices, fetched again when older than a day (an hour while a configured cluster's
        machine type and region has none); a failure logs and keeps the old ones. None read when no cluster's
        machine type is one the catalog can price (``none``: priced by ``pricing`` alone): the whole catalog
        was read every hour, found nothing, and was logged as failed."""
        from zen.store.prices import refresh_if_stale

        if not (wanted := catalog_pairs(self.config.clusters)):
            return "none"
        try:
            done = refresh_if_stale(self.db, fetch, self.clock(), wanted=wanted)
        except Exception as exc:  # noqa: BLE001 - prices are never worth a failed tick
            log.warning("could not refresh the prices", extra={"error": str(exc)})
            return "failed"
        if done.outcome == "failed":
            log.warning("the billing catalog failed; the old prices stay", extra={"error": done.error})
        elif done.outcome == "refreshed":
            log.info("prices refreshed from the billing catalog", extra={"prices": done.prices})
        return done.outcome

    def _with_envelope(self, source: str, event_id: str, event_type: str | None, data, handler) -> Outcome:
        self._schema_ready()
        try:
            envelope = envelope_from_cloud_event(event_id, event_type, data)
        except Rejected as rejection:
            raw = data if isinstance(data, bytes) else str(data).encode("utf-8", "backslashreplace")
            envelope = PubSubEnvelope(message_id=escape_unstorable(str(event_id), 256), data=raw)
            return self.jobs.reject(envelope, source, rejection.reason, None, self._refused_as(source))
        try:
            return handler(envelope)
        except DataRejected as rejection:
            # The safety net: input that got past validation but that Postgres refuses.
            return self.jobs.reject(envelope, source, rejection.reason, None, self._refused_as(source))

    def _refused_as(self, source: str) -> RejectionEvent:
        """A refused submission is ``job.rejected``; any other message refused, ``job.message_ignored``."""
        return "job.rejected" if source == self.config.topics.job_submitted else "job.message_ignored"
