"""The notifier: from a ``zen-job-events`` message to the notices its job's targets asked for (its own
``notify`` and its queue's), each delivered at least once and, once delivered, not again.

For each target (``zen.core.notify``): claim the delivery in the ledger (a redelivered event finds it
done and skips it; two deliveries at once do not both send), read the URL's secret (or the email API's
key), POST, record the answer. A 2xx is sent; a refusal (a 4xx but 408/425/429, a 3xx, a secret the
notifier may not read or holding no https URL) is recorded and never retried; anything else (no answer
within ``notifications.timeout_s``, a 5xx, Secret Manager unavailable) is recorded as failed and, after
every target was tried, raises ``TransientError``: the function answers 500 and Pub/Sub redelivers the
event with backoff, up to its max delivery attempts, then to ``zen-job-events-dead-letter``. The scheduler
never waits on any of it: the event was published after its decision was committed.

A job's notices reach a target in the job's order: one finds the job's earlier notices to that target still
unsent in the ledger (a POST that failed, its event waiting for redelivery) and sends them first, or waits.

A target whose POST got no answer (``NoAnswer``: none within the timeout, or no connection) is not POSTed to again
for a while, ``STALL_FIRST_S`` doubling with each such POST to ``STALL_MOST_S``; then by one delivery at a time,
until one gets an answer. Meanwhile its notices are recorded failed at once and their events redelivered as any
failure's: one endpoint that hangs holds one of the notifier's few requests once per while, not once per notice of
an array's many tasks while everyone else's notices wait. The state is Postgres's (``Ledger.gate``), not an
instance's: every instance then learns it from one timeout, a new instance (they come and go with the load) too.

A URL is read here only, and never written to a row or a log line: they name the target by its secret.
Why and the guarantees: docs/how-to/notifications.md.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Literal, Protocol

from zen.core.clock import Clock
from zen.core.config import ZenConfig
from zen.core.errors import TransientError
from zen.core.events import PubSubEnvelope
from zen.core.models import Job
from zen.core.notify import (DeliveryFailed, DeliveryRefused, NoAnswer, NotifyTarget, delivery_key, email_body,
                             merged, notice_of, refused_target, slack_body, url_problem, verdict, webhook_body)

log = logging.getLogger("zen.notify")
STALL_FIRST_S = 10.0  # Pub/Sub's first redelivery of the event that found no answer (terraform: minimum_backoff)
STALL_MOST_S = 300.0  # well inside an event's redeliveries (10 s doubling to 600 s, 10 of them: about 40 minutes)


class Ledger(Protocol):
    """What the notifier asks of Postgres (``zen.store.notifications.PostgresNotifications``)."""

    def job(self, job_id: str) -> Job | None: ...

    def claim(self, key: str, *, job_id: str, attempt: int | None, event: str, target: str, now: datetime,
              hold_s: float, at: datetime | None = None,
              payload: dict[str, Any] | None = None) -> tuple[Literal["mine", "done", "busy"], int]: ...

    def before(self, key: str, *, job_id: str, target: str, at: datetime, end: bool) -> list[dict[str, Any]]: ...

    def settle(self, key: str, state: Literal["sent", "refused", "failed"], detail: str, now: datetime,
               tries: int) -> bool: ...

    def gate(self, endpoint: str, now: datetime,
             hold_s: float) -> tuple[Literal["open", "probe", "wait"], datetime | None]: ...

    def stalled(self, endpoint: str, now: datetime, first_s: float, most_s: float) -> datetime | None: ...

    def answered(self, endpoint: str) -> None: ...

    def untried(self, endpoint: str, until: datetime) -> None: ...

    def prune(self, now: datetime) -> None: ...


class Poster(Protocol):
    """One JSON POST (``zen.adapters.webhooks.HttpPoster``): the status code, or ``DeliveryFailed`` (``NoAnswer``
    when none came)."""

    def post(self, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> int: ...


@dataclass
class NotifyOutcome:
    notice: str | None = None  # None: the event is no notice (most are not)
    sent: list[str] = field(default_factory=list)  # target names
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # delivered (or refused) by an earlier delivery


class Notifier:
    def __init__(self, config: ZenConfig, ledger: Ledger, read_secret: Callable[[str], str], poster: Poster,
                 clock: Clock, email_poster: Poster | None = None, timeout_s: float | None = None):
        """``poster`` posts to the URLs users keep in secrets; ``email_poster`` (default ``poster``) to the
        operator's email API, which may be a relay inside the VPC. ``timeout_s``: the request's time (the function's,
        ``ZEN_FUNCTION_TIMEOUT_S``; None: no bound), which a target after the first is started only well inside."""
        self._config = config
        self._settings = config.notifications
        self._ledger = ledger
        self._read_secret = read_secret
        self._poster = poster
        self._email_poster = email_poster or poster
        self._clock = clock
        self._timeout_s = timeout_s

    def handle(self, envelope: PubSubEnvelope) -> NotifyOutcome:
        try:
            event = json.loads(envelope.data)
        except (ValueError, RecursionError):  # RecursionError: nested past what the parser follows
            event = None
        if not isinstance(event, dict):
            log.error("an event that is not a JSON object was skipped", extra={"message_id": envelope.message_id})
            return NotifyOutcome()
        notice = notice_of(event)
        if notice is None:
            return NotifyOutcome()
        job = self._ledger.job(str(event["job_id"]))
        outcome = NotifyOutcome(notice)
        if job is None:
            log.warning("a job event names no job; no notice", extra={"job_id": event["job_id"], "notice": notice})
            return outcome
        if _told_by_its_end(notice, event, job):
            return outcome
        targets = [t for t in self._targets(job) if notice in t.on]
        if not targets:
            return outcome
        facts = {"status": job.status.value, "attempt": job.attempt, "queue": job.queue, "user_id": job.user_id,
                 "labels": job.request.get("labels", {})}
        began, tried = time.monotonic(), False  # (a target told by an earlier delivery, skipped, is no try)
        for target in targets:
            if tried and self._timeout_s is not None and time.monotonic() - began + self._hold_s > self._timeout_s:
                # Its claim's hold would outlast the request: the function would be cut off while it sends, and
                # Pub/Sub would take the event for failed all the same. Left to the event's redelivery, unclaimed.
                outcome.failed.append(target.name)
                log.warning("notification not tried: the request's time ran out; the event will be redelivered",
                            extra={**_said(notice, event, target, delivery_key(event, notice, target)),
                                   "detail": f"{time.monotonic() - began:.0f} s of {self._timeout_s:g} s used"})
                continue
            skipped = len(outcome.skipped)
            self._deliver(notice, event, facts, target, outcome, job)
            tried = tried or len(outcome.skipped) == skipped
        self._ledger.prune(self._clock())
        if outcome.failed:
            raise TransientError(f"{len(outcome.failed)} of {len(targets)} notifications of job {job.job_id} "
                                 f"({notice}) will be retried: {', '.join(outcome.failed)}")
        return outcome

    def _targets(self, job: Job) -> list[NotifyTarget]:
        own = [NotifyTarget.model_validate(t, strict=False) for t in job.request.get("notify") or ()]
        queue = self._config.queue(job.queue) if job.queue else None
        return merged(own, queue.notify if queue is not None else [])

    def _claim(self, notice: str, event: dict[str, Any], target: NotifyTarget,
               key: str) -> tuple[Literal["mine", "done", "busy"], int]:
        return self._ledger.claim(key, job_id=str(event["job_id"]), attempt=event.get("attempt"), event=notice,
                                  target=target.name, now=self._clock(), hold_s=self._hold_s, at=_event_time(event),
                                  payload=event)

    @property
    def _hold_s(self) -> float:
        return 2 * self._settings.timeout_s + 30  # the secret's read and the POST, with room

    def _deliver(self, notice: str, event: dict[str, Any], facts: dict[str, Any], target: NotifyTarget,
                 outcome: NotifyOutcome, job: Job) -> None:
        key = delivery_key(event, notice, target)
        said = _said(notice, event, target, key)
        claim, tries = self._claim(notice, event, target, key)
        if claim == "done":
            outcome.skipped.append(target.name)
            return
        if claim == "busy":  # another delivery of this event is sending it: ask again later
            outcome.failed.append(target.name)
            log.info("notification being sent by another delivery; retried later", extra=said)
            return
        if (waits := self._earlier_first(notice, event, facts, target, key, job)) is not None:
            self._settle(key, "failed", waits, outcome.failed, target, said, tries)
            return
        self._attempt(notice, event, facts, target, key, tries, said, outcome)

    def _earlier_first(self, notice: str, event: dict[str, Any], facts: dict[str, Any], target: NotifyTarget,
                       key: str, job: Job) -> str | None:
        """Send first the job's notices to ``target`` that came before this one and are not sent yet (a POST that
        failed, its event waiting for Pub/Sub's redelivery or gone to the dead letter), in their order: a job's end
        never reaches a target before its preemption. None when none is left unsent, else why this one waits."""
        if (at := _event_time(event)) is None:
            return None
        for row in self._ledger.before(key, job_id=str(event["job_id"]), target=target.name, at=at,
                                       end=notice != "PREEMPTED"):
            earlier, earlier_key = row["payload"], str(row["key"])
            earlier_notice = notice_of(earlier) if isinstance(earlier, dict) else None
            if earlier_notice not in target.on or _told_by_its_end(earlier_notice, earlier, job):
                continue  # its own deliveries would not send it either
            claim, tries = self._claim(earlier_notice, earlier, target, earlier_key)
            if claim == "mine":
                done = NotifyOutcome(earlier_notice)
                self._attempt(earlier_notice, earlier, facts, target, earlier_key, tries,
                              _said(earlier_notice, earlier, target, earlier_key), done)
                claim = "done" if done.sent or done.refused else claim
            if claim != "done":
                return (f"waits for the job's earlier {earlier_notice} notice (attempt {earlier.get('attempt')}) to "
                        "this target, not sent yet")
        return None

    def _attempt(self, notice: str, event: dict[str, Any], facts: dict[str, Any], target: NotifyTarget, key: str,
                 tries: int, said: dict[str, Any], outcome: NotifyOutcome) -> None:
        """Send the notice whose claim this delivery holds (try ``tries``) and record its outcome."""
        try:
            status = self._gated_send(notice, event, facts, target, key)
        except DeliveryRefused as refusal:
            self._settle(key, "refused", str(refusal), outcome.refused, target, said, tries)
            return
        except DeliveryFailed as failure:
            self._settle(key, "failed", str(failure), outcome.failed, target, said, tries)
            return
        except Exception:  # noqa: BLE001 - this target's failure: the others are still tried, this one retried
            log.exception("notification failed while sending; retried later", extra=said)
            self._settle(key, "failed", "the notifier failed while sending", outcome.failed, target, said, tries)
            return
        except BaseException:
            self._ledger.settle(key, "failed", "the notifier failed while sending", self._clock(), tries)
            raise
        answer = verdict(status)
        state: Literal["sent", "refused", "failed"] = "failed" if answer == "retry" else answer
        into = {"sent": outcome.sent, "refused": outcome.refused, "failed": outcome.failed}[state]
        self._settle(key, state, f"HTTP {status}", into, target, said, tries)

    def _settle(self, key: str, state: Literal["sent", "refused", "failed"], detail: str, into: list[str],
                target: NotifyTarget, said: dict[str, Any], tries: int) -> None:
        extra = {**said, "detail": detail, "try": tries}
        if not self._ledger.settle(key, state, detail, self._clock(), tries):
            # This delivery outlived its claim's hold and a later one took it over: that one's outcome is the
            # ledger's (a "failed" here would undo its "sent", and the next redelivery would send it again).
            log.warning("notification outcome not recorded: a later delivery took it over", extra=extra)
            return
        into.append(target.name)
        if state == "sent":
            log.info("notification sent", extra=extra)
        elif state == "refused":
            log.warning("notification refused; not retried", extra=extra)
        else:
            log.warning("notification failed; the event will be redelivered", extra=extra)

    def _gated_send(self, notice: str, event: dict[str, Any], facts: dict[str, Any], target: NotifyTarget,
                    key: str) -> int:
        """``_send``, unless the target's endpoint gave no answer lately (the module's docstring): then
        ``DeliveryFailed`` at once, no secret read and no POST."""
        endpoint = "email" if target.email is not None else target.name  # all email goes through one API
        gate, until = self._ledger.gate(endpoint, self._clock(), self._hold_s)
        if gate == "wait":
            assert until is not None
            raise DeliveryFailed("not tried: its endpoint gave no answer lately; tried again from "
                                 f"{until.isoformat(timespec='seconds')}")
        try:
            status = self._send(notice, event, facts, target, key)
        except NoAnswer:
            self._ledger.stalled(endpoint, self._clock(), STALL_FIRST_S, STALL_MOST_S)
            raise
        except BaseException:
            if gate == "probe":  # no POST made (its secret), or an answer that is no HTTP: the next delivery tries
                assert until is not None
                self._ledger.untried(endpoint, until)
            raise
        if gate == "probe":
            self._ledger.answered(endpoint)
        return status

    def _send(self, notice: str, event: dict[str, Any], facts: dict[str, Any], target: NotifyTarget,
              key: str) -> int:
        headers = {"Zen-Delivery": key}  # the same on every retry: a receiver may drop a repeat
        timeout_s = self._settings.timeout_s
        if target.email is not None:
            email = self._settings.email
            if email is None or (why := refused_target(self._settings, target, "notify")):  # checked at submission:
                raise DeliveryRefused(why if email else "this Zen sends no email now (no notifications.email)")  # since?
            api_key = self._read_secret(email.api_key_secret)
            body = email_body(notice, event, facts, email.sender, target.email)
            return self._email_poster.post(email.api_url, body, {**headers, "Authorization": f"Bearer {api_key}"},
                                           timeout_s)
        assert target.secret is not None
        url = self._read_secret(target.secret)
        if (problem := url_problem(url)) is not None:
            raise DeliveryRefused(f"its secret: {problem}")
        body = slack_body(notice, event, facts) if target.slack is not None else webhook_body(notice, event, facts, key)
        return self._poster.post(url, body, headers, timeout_s)


def _said(notice: str, event: dict[str, Any], target: NotifyTarget, key: str) -> dict[str, Any]:
    """What a log line says of one delivery."""
    return {"job_id": event["job_id"], "attempt": event.get("attempt"), "notice": notice, "target": target.name,
            "delivery": key}


def _told_by_its_end(notice: str, event: dict[str, Any], job: Job) -> bool:
    """A preemption whose attempt ended the job (its attempts spent, its late report; or it finished, hit its limit
    or was stopped by its user in the stop's grace): no rerun came, and the end's notice tells it."""
    return notice == "PREEMPTED" and job.status.terminal and job.attempt == event.get("attempt")


def _event_time(event: dict[str, Any]) -> datetime | None:
    """The event's ``at`` (when Zen decided it), or None when it holds no time with its zone."""
    try:
        at = datetime.fromisoformat(str(event.get("at")))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None
