"""What ``zen submit`` knows of a job_id before publishing: the job the database holds under it
(``known_job``), and what it published lately from this machine under a job_id the user chose, so that a
second submit of that id, made before the first reached the database, says so instead of "submitted".

The database tells whether a job_id is taken once the function has written the job; between the publish
and that write (a second or so; longer on a cold start) only the publisher knows. Each ``zen submit`` with
a chosen job_id records (job_id, request fingerprint, message id, time) in ``~/.cache/zen/submitted.json``
(``$XDG_CACHE_HOME``), under the topic and database it went to, for ``WINDOW_S``; a record is written
before publishing (``message_id`` None: being published) and dropped when the publish fails. Records are
read and written under an exclusive lock, so two submits at once see each other. A generated id is recorded
once published, never checked (it is unique): ``zen stop`` right after ``zen submit`` finds it there.

It also reads the stops kept for a job_id no job had when they came (``stopped_on_arrival``): Zen cancels a
job submitted under such an id as it arrives, so ``zen submit`` says so instead of publishing it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

WINDOW_S = 600.0  # a record is kept this long; one the database should show by now is ignored sooner
_Key = TypeVar("_Key")  # what known_job reads by: a job_id, or an array's ids
SHOWN_WITHIN_S = 60.0  # a published job is in a readable database well within this


@dataclass(frozen=True)
class Published:
    job_id: str
    request_hash: str
    message_id: str | None  # None: another `zen submit` is publishing it right now
    at: float  # time.time() when it was recorded

    def age(self, now: float | None = None) -> str:
        seconds = max(0, int((now if now is not None else time.time()) - self.at))
        return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"


def topic(field: str) -> str:
    """The full name of the configuration's topic ``field`` (``job_submitted``, ...) in this project."""
    from zen.cli.kit import deployed_config

    config = deployed_config()
    return f"projects/{config.project}/topics/{getattr(config.topics, field)}"


def known_job(job_id: _Key, read: Callable[[_Key], Any]) -> tuple[Any, bool]:
    """(the job of that id as ``read`` finds it, whether the database could be read): ``(None, False)``
    without a database or when it cannot be read (then a submission is published and the function decides).
    (An array's ids alike: those of them taken.)"""
    from zen.cli.kit import database_configured

    if not database_configured():
        return None, False
    try:
        return read(job_id), True
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - a check only
        return None, False


def stopped_on_arrival(config: Any, request: Any, queue: str | None) -> str | None:
    """Why ``request`` (a JobRequest with its job_id, to ``queue``) would be cancelled as it arrives: a stop kept
    for its id (sent while no job had it: ``zen stop --force``, or a stop of a submission on its way) whose sender
    may stop the job, which Zen applies to it when it comes (``zen.jobs.authorization.kept_stop``; a stop kept
    without a proven sender counts, as a Zen with ``ZEN_AUTH=off`` applies it: the CLI cannot see ``ZEN_AUTH``,
    and the refusal says that one requiring proof would run the job). None: none would, or the database cannot be
    read (the function decides)."""
    from datetime import timezone

    from zen.core.models import Job
    from zen.jobs.authorization import EARLY_STOP_KEPT, kept_stop

    job_id = request.job_id
    stops = known_job(job_id, _kept_stops)[0] if job_id else None
    if not stops:
        return None
    would_be = Job.model_construct(job_id=job_id, user_id=request.user_id, queue=queue)  # what may_stop reads
    chosen, _ = kept_stop(config, would_be, [(row["reason"], row["principal"]) for row in stops], False)
    if chosen is None:  # every sender's stop is refused (noted in the job's history): the job runs
        return None
    sender = chosen[1]
    at = next(row for row in stops if row["principal"] == sender)["requested_at"].astimezone(timezone.utc)
    until = at + EARLY_STOP_KEPT
    which = "every task of this array" if request.array else "this job"
    would = (f"Zen would cancel {which} as it arrives" if sender else  # kept while ZEN_AUTH was off (unseen here)
             f"Zen with ZEN_AUTH=off, as when it was kept, would cancel {which} as it arrives (one that requires "
             "proof now would run it)")
    return (f"a stop is kept for job_id {job_id} (sent {at:%Y-%m-%d %H:%M} UTC by {sender or 'a sender without proof'}"
            f", before any job had that id): {would}. Not published; use a new job_id (or none: zen makes one), or "
            f"this one after {until:%Y-%m-%d %H:%M} UTC, when Zen forgets the stop")


def _kept_stops(job_id: str) -> list[dict[str, Any]]:
    from zen.cli.kit import read
    from zen.store import repository

    return read(lambda session: repository.kept_stops_of(session, job_id))


def _path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "zen" / "submitted.json"


def destination(topic: str) -> str:
    """Where a submission goes: the topic (and the Pub/Sub emulator) and the database that will hold it."""
    return " ".join(filter(None, (os.environ.get("PUBSUB_EMULATOR_HOST"), topic, os.environ.get("ZEN_DATABASE_URL"),
                                  os.environ.get("ZEN_CLOUDSQL_INSTANCE"))))


class Journal:
    """The records of one destination (``destination``), open under the lock for one check-and-record."""

    def __init__(self, data: dict, where: str, now: float):
        self._data, self._where, self._now = data, where, now

    def recent(self, job_id: str, database_readable: bool) -> Published | None:
        """The record of ``job_id``, if it is recent enough to matter: within ``WINDOW_S``, or within
        ``SHOWN_WITHIN_S`` when the database could be read and does not hold the job (it would by now)."""
        row = self._data.get(self._where, {}).get(job_id)
        if row is None:
            return None
        record = Published(job_id, row["request_hash"], row.get("message_id"), row["at"])
        window = SHOWN_WITHIN_S if database_readable else WINDOW_S
        return record if self._now - record.at <= window else None

    def record(self, job_id: str, request_hash: str, message_id: str | None) -> None:
        entry = {"request_hash": request_hash, "message_id": message_id, "at": self._now}
        self._data.setdefault(self._where, {})[job_id] = entry

    def forget(self, job_id: str) -> None:
        self._data.get(self._where, {}).pop(job_id, None)


@contextmanager
def journal(topic: str) -> Iterator[Journal]:
    """The records for ``topic``'s destination, locked; written back (old records dropped) on exit. A
    journal that cannot be read or written is an empty one: the check only helps."""
    path, now = _path(), time.time()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")
    except OSError:
        yield Journal({}, destination(topic), now)
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        try:
            data = json.loads(handle.read() or "{}")
            data = data if isinstance(data, dict) else {}
        except ValueError:
            data = {}
        book = Journal(data, destination(topic), now)
        yield book
        kept = {where: {job: row for job, row in rows.items()
                        if isinstance(row, dict) and now - row.get("at", 0) <= WINDOW_S}
                for where, rows in data.items() if isinstance(rows, dict)}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({where: rows for where, rows in kept.items() if rows}))


def update(topic: str | None, job_id: str, request_hash: str, message_id: str | None) -> None:
    """Record the message ``job_id`` went out in (``None``: forget it, its publish failed); ``topic`` None: a
    generated job_id, never recorded."""
    if topic is None:
        return
    with journal(topic) as book:
        if message_id is None:
            book.forget(job_id)
        else:
            book.record(job_id, request_hash, message_id)


def published_lately(job_id: str) -> Published | None:
    """The record of ``job_id`` as published from this machine within ``WINDOW_S`` (a generated id's too), if
    any: ``zen stop`` sends a stop for it though the database does not show it yet (Zen keeps the stop and
    cancels the job when it arrives)."""
    with journal(topic("job_submitted")) as book:
        found = book.recent(job_id, database_readable=False)
    if found is None or not found.message_id or _refused(job_id, found.message_id):
        return None  # refused: a stop kept for it would cancel the corrected job submitted again under that id
    return found


def _refused(job_id: str, message_id: str) -> bool:
    """Whether the database holds a refusal of that message (False when it cannot be read)."""
    from zen.cli.kit import database
    from zen.store import repository

    try:
        db = database()
        try:
            with db.transaction() as session:
                return repository.latest_rejection(session, job_id, message_id) is not None
        finally:
            db.close()
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - a check only
        return False


def check_in_flight(topic: str | None, job_id: str, request_hash: str, readable: bool) -> None:
    """``CliError`` when an earlier ``zen submit`` from this machine published ``job_id`` moments ago and the
    database does not show it yet (``readable``: it could be read); else records this one as being published.
    ``topic`` None: a generated job_id, unique, neither checked nor recorded."""
    from zen.cli.kit import CliError

    if topic is None:
        return
    with journal(topic) as book:
        earlier = book.recent(job_id, readable)
        if earlier is not None and earlier.message_id and readable and _refused(job_id, earlier.message_id):
            earlier = None  # the function refused that one: the id is still free
        if earlier is not None:
            how = (f"was published {earlier.age()} ago by another `zen submit` (message {earlier.message_id})"
                   if earlier.message_id else "is being published by another `zen submit` right now")
            where = "not in the database yet" if readable else "the database could not be read to see it"
            if earlier.request_hash != request_hash:
                raise CliError(f"job_id {job_id} {how} with another request ({where}): Zen would refuse one of "
                               "the two; use a new job_id (or none: zen makes one). Not published", 1)
            raise CliError(f"job {job_id} {how} ({where}): the same request runs nothing new, one job runs; "
                           f"follow it with zen jobs get {job_id}. Not published", 1)
        book.record(job_id, request_hash, None)
