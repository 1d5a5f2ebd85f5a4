"""A job's ``notify``: where Zen tells someone that the job ended (SUCCEEDED, FAILED, CANCELLED) or was
preempted (an attempt lost, the job rerun), and what it says. Pure: the targets and their checks, which
``zen-job-events`` message is which notice (``notice_of``), the bodies sent (``slack_body``,
``webhook_body``, ``email_body``), and what an endpoint's answer means (``verdict``). The delivery is
``zen.jobs.notifications``; the reference and the guarantees: docs/how-to/notifications.md.

A Slack or webhook target names a Secret Manager secret version holding its URL (a URL is a credential:
whoever holds it may post), never the URL itself; only the notifier reads it. An email target names an
address, which the configuration's ``notifications.email.recipients`` must allow.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
from fnmatch import fnmatchcase
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from zen.core import gave_back
from zen.core.cluster_config import Strict
from zen.core.secrets import check_reference, secret_parts

MAX_TARGETS: Final = 4  # per job (and per queue): a handful; more is a mailing list's job
EVENTS: Final = ("SUCCEEDED", "FAILED", "CANCELLED", "PREEMPTED")
NoticeKind = Literal["SUCCEEDED", "FAILED", "CANCELLED", "PREEMPTED"]
_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+")


def _event(value: str) -> str:
    if value not in EVENTS:
        raise ValueError(f"{value[:40]!r} is not an event Zen notifies of: give {', '.join(EVENTS)}")
    return value


def _email(value: str) -> str:
    if len(value) > 254 or not _EMAIL.fullmatch(value):
        raise ValueError(f"{value[:80]!r} is not an email address")
    return value


class NotifyTarget(BaseModel):
    """One place to notify: exactly one of ``slack`` (a secret version holding a Slack incoming-webhook
    URL), ``webhook`` (one holding an HTTPS URL, POSTed a JSON body) or ``email`` (an address); ``on``:
    the events it hears of (default: all four)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    slack: Annotated[str, Field(max_length=1024)] | None = None
    webhook: Annotated[str, Field(max_length=1024)] | None = None
    email: Annotated[str, AfterValidator(_email)] | None = None
    on: list[Annotated[str, AfterValidator(_event)]] = Field(
        default_factory=lambda: list(EVENTS), min_length=1, max_length=len(EVENTS))

    @model_validator(mode="after")
    def _one_place(self) -> "NotifyTarget":
        given = [kind for kind in ("slack", "webhook", "email") if getattr(self, kind) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of slack, webhook (each a secret version holding the URL) or email"
                             + (f", not {' and '.join(given)}" if given else ""))
        for kind in ("slack", "webhook"):
            if (reference := getattr(self, kind)) is not None:
                check_reference(kind, reference)
        return self

    @property
    def kind(self) -> str:
        return "slack" if self.slack is not None else "webhook" if self.webhook is not None else "email"

    @property
    def secret(self) -> str | None:
        """The secret version holding the URL (slack, webhook); None for an email."""
        return self.slack or self.webhook

    @property
    def name(self) -> str:
        """What logs and the notifications table say of it: the kind and the secret's name or the address."""
        return f"{self.kind} {self.secret or self.email}"


def check_targets(value: list[NotifyTarget]) -> list[NotifyTarget]:
    if len(value) > MAX_TARGETS:
        raise ValueError(f"at most {MAX_TARGETS} targets ({len(value)} given)")
    return value


NotifyTargets = Annotated[list[NotifyTarget], AfterValidator(check_targets)]


def _api_url(value: str) -> str:
    """An http(s) URL with a host (one loaded without, every email notice failed at delivery, retried to the
    dead letter, saying "no answer")."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"give an http(s) URL with a host, e.g. https://api.sendgrid.com/v3/mail/send, not {value!r}")
    return value


class EmailConfig(Strict):
    """``notifications.email``: a SendGrid-style HTTP API (``POST api_url`` with ``Authorization: Bearer
    <key>`` and SendGrid's v3 JSON), its key in a secret version, the sender, and who may be mailed."""

    api_url: Annotated[str, AfterValidator(_api_url)] = "https://api.sendgrid.com/v3/mail/send"
    api_key_secret: Annotated[str, AfterValidator(lambda v: check_reference("api_key_secret", v))]
    sender: Annotated[str, AfterValidator(_email)]
    recipients: list[str] = Field(min_length=1, description="Patterns of addresses jobs may mail, e.g. *@example.com")


class NotificationsConfig(Strict):
    """The configuration's ``notifications:`` section."""

    secret_prefix: str = Field(default="zen-notify-", pattern=r"^[A-Za-z0-9_-]+$", description=(
        "The notifier may read only secrets whose name starts with this (terraform: notify_secret_prefix; "
        "empty would be every secret)"))
    timeout_s: float = Field(default=10, gt=0, le=60, description="One POST to an endpoint")
    email: EmailConfig | None = None

    @model_validator(mode="after")
    def _key_readable(self) -> "NotificationsConfig":
        """The email API's key is read by the notifier, which may read only ``secret_prefix`` secrets: one
        named otherwise loaded, and every email notice then failed for good on its read."""
        if self.email is not None and (why := _unreadable_name(self.secret_prefix, self.email.api_key_secret, "key")):
            raise ValueError(f"email.api_key_secret: {why}")
        return self


def _unreadable_name(prefix: str, reference: str, holding: str = "URL") -> str | None:
    """Why the notifier may not read the secret ``reference`` names (terraform grants it this project's global
    ``prefix``* secrets only, not regional ones)."""
    project, location, name = secret_parts(reference)
    if location is not None:
        return (f"the notifier reads only global secrets, not one of location {location}: store the {holding} in "
                f"projects/{project}/secrets/{name}")
    if name.startswith(prefix):
        return None
    return f"the notifier reads only secrets named {prefix}*, not {name}: store the {holding} in a secret named {prefix}{name}"


def foreign_secret(reference: str, project: str | None, holding: str = "URL") -> str | None:
    """Why the notifier may not read ``reference``, a secret of another project than this Zen's ``project``
    (terraform grants it this project's alone; a project number is let through, IAM judges it); None: it may."""
    owner, _, name = secret_parts(reference)
    if project is None or owner == project or owner.isdigit():
        return None
    return (f"the notifier reads only secrets of this Zen's project {project}, not {owner}'s: store the {holding} in "
            f"projects/{project}/secrets/{name}")


def refused_target(config: NotificationsConfig, target: NotifyTarget, where: str,
                   project: str | None = None) -> str | None:
    """Why the notifier could never deliver to ``target`` (None: it could): a secret it may not read (named
    otherwise than ``secret_prefix``, or, given this Zen's ``project``, of another project: terraform grants it
    this project's alone; a project number is let through, IAM judges it), an email with no email configured
    or to an address not allowed."""
    if target.secret is not None:
        if why := _unreadable_name(config.secret_prefix, target.secret) or foreign_secret(target.secret, project):
            return f"{where}.{target.kind}: {why}"
        return None
    assert target.email is not None
    if config.email is None:
        return f"{where}.email: this Zen sends no email (its configuration has no notifications.email)"
    if not any(fnmatchcase(target.email.lower(), p.lower()) for p in config.email.recipients):
        return f"{where}.email: {target.email} is not among the addresses jobs may mail ({config.email.recipients})"
    return None


def merged(*groups: list[NotifyTarget]) -> list[NotifyTarget]:
    """The job's and its queue's targets, one per place (the events each hears of, joined)."""
    places: dict[tuple[str, str], NotifyTarget] = {}
    for target in (t for group in groups for t in group):
        place = (target.kind, target.secret or (target.email or "").lower())
        if place in places:
            known = places[place]
            target = known.model_copy(update={"on": [e for e in EVENTS if e in known.on or e in target.on]})
        places[place] = target
    return list(places.values())


# -- which event is which notice ------------------------------------------------------------------
def notice_of(event: dict[str, Any]) -> NoticeKind | None:
    """The notice a ``zen-job-events`` payload (a ``JobEvent``, as JSON) is, or None. A terminal status
    change is its status; a preemption is the change to LOST (the VM preempted or silent: the job is rerun,
    or FAILED when its attempts are spent, which is the FAILED notice's) and a queue's ``job.preempted``."""
    kind, job_id = event.get("type"), event.get("job_id")
    if not isinstance(job_id, str) or not job_id or "\x00" in job_id:  # names no job: nothing to notify of
        return None
    if kind == "job.preempted":
        return "PREEMPTED"
    if kind != "job.status_changed":
        return None
    ends: dict[str, NoticeKind] = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "CANCELLED": "CANCELLED",
                                   "LOST": "PREEMPTED"}
    return ends.get(str(event.get("to_status")))


# The Pub/Sub filter of the notifier's subscription (terraform/notifications.tf, the local stack): the events
# ``notice_of`` may make a notice of, by the attributes ``zen.jobs.announce`` gives them.
NOTICE_FILTER: Final = ('attributes.status = "SUCCEEDED" OR attributes.status = "FAILED" OR '
                        'attributes.status = "CANCELLED" OR attributes.status = "LOST" OR '
                        'attributes.type = "job.preempted"')


def delivery_key(event: dict[str, Any], notice: str, target: NotifyTarget) -> str:
    """One (event, target)'s identity: the same for a redelivered event and for an outbox row published
    twice (the payload is the same), whatever the Pub/Sub message id."""
    identity = "\x1f".join(str(event.get(k)) for k in ("job_id", "attempt", "type", "to_status", "at"))
    return hashlib.sha256(f"{identity}\x1f{notice}\x1f{target.name}".encode()).hexdigest()[:40]


# -- what is sent ---------------------------------------------------------------------------------
_VERB = {"SUCCEEDED": "succeeded", "FAILED": "failed", "CANCELLED": "was cancelled", "PREEMPTED": "was preempted"}


def verb(notice: str, event: dict[str, Any]) -> str:
    """What happened to the job, as its notice's text and subject say. A PREEMPTED notice of an attempt lost (the
    change to LOST) "was preempted" only where its reason says a preemption (its VM's, as an agent reported it or a
    scaling pass saw it taken; its queue's); else it "was requeued": its VM gave it back (``zen.core.gave_back``: a
    step before the command the cloud failed, its VM not shut down), went silent ("no heartbeat from ..."),
    reached the end of its flex-start run, or is stopping for host maintenance
    (``zen.agent.shutdown.Shutdown.said``). A queue's ``job.preempted`` event is a preemption."""
    reason = str(event.get("reason") or "")
    if notice == "PREEMPTED" and event.get("type") != "job.preempted" and (
            gave_back.told(reason) or "preempted" not in reason):
        return "was requeued"
    return _VERB[notice]


def summary(notice: str, event: dict[str, Any], job: dict[str, Any]) -> str:
    """One line: what happened to which job, where, and why."""
    where = " ".join(p for p in (event.get("cluster"), event.get("region") and f"in {event['region']}") if p)
    exit_code = f", exit code {event['exit_code']}" if event.get("exit_code") is not None else ""
    rerun = ""
    if notice == "PREEMPTED" and job.get("attempt", 0) > (event.get("attempt") or 0):
        rerun = f"; rerun as attempt {(event.get('attempt') or 0) + 1}"  # its own rerun (the job's may be later)
    return (f"Zen job {event['job_id']} {verb(notice, event)} (attempt {event.get('attempt')}{exit_code}"
            f"{', ' + where if where else ''}): {event.get('reason', '')}{rerun}")


def webhook_body(notice: str, event: dict[str, Any], job: dict[str, Any], key: str) -> dict[str, Any]:
    """The JSON a webhook receives (version 1; docs/reference/messages.md, "Notifications")."""
    return {
        "version": 1, "type": "zen.notification", "id": key, "event": notice, "job_id": event["job_id"],
        "attempt": event.get("attempt"), "status": job.get("status"), "reason": event.get("reason"),
        "exit_code": event.get("exit_code"), "cluster": event.get("cluster"), "region": event.get("region"),
        "queue": job.get("queue"), "user_id": job.get("user_id"), "labels": job.get("labels", {}),
        "at": event.get("at"), "text": summary(notice, event, job),
    }


def slack_body(notice: str, event: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming webhook's message: one mrkdwn line, its ``&``, ``<`` and ``>`` escaped as Slack asks:
    a reason is the job's or its user's words (a stop's reason, its output's last line), and ``<!channel>``
    or ``<https://...|text>`` in it would ping the channel or show a link the user did not write."""
    mark = {"SUCCEEDED": ":white_check_mark:", "FAILED": ":x:", "CANCELLED": ":no_entry_sign:",
            "PREEMPTED": ":warning:"}[notice]
    text = summary(notice, event, job).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {"text": f"{mark} {text}"}


def email_body(notice: str, event: dict[str, Any], job: dict[str, Any], sender: str, to: str) -> dict[str, Any]:
    """SendGrid's v3 ``mail/send`` JSON."""
    text = summary(notice, event, job)
    return {"personalizations": [{"to": [{"email": to}]}], "from": {"email": sender},
            "subject": f"Zen job {event['job_id']} {verb(notice, event)}",
            "content": [{"type": "text/plain", "value": text}]}


def address_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` is as a literal, in every form the resolver reads as one (``127.1``,
    ``2130706433``, ``0x7f.1`` are 127.0.0.1 to it), or None for a name."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefxABCDEFX." for c in host) and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def private_name(host: str) -> bool:
    """A name for this machine or its network, never a notification's endpoint: localhost, the metadata
    server, ``*.internal`` (Compute's internal DNS) and ``*.local``."""
    name = host.lower().rstrip(".")
    return (name in ("localhost", "metadata") or name.endswith((".localhost", ".internal", ".local")))


def url_problem(url: str) -> str | None:
    """Why a URL read from a secret is not one Zen posts to: HTTPS only (plain HTTP to a loopback address,
    a local sink, is allowed). The answer never quotes the URL."""
    if any(ord(c) <= 0x20 or c == "\x7f" for c in url):  # a space or a line break pasted in: no request carries it
        return "its URL holds a space or a control character: give the URL alone, percent-encoded"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - a port out of range or not a number raises here, not at the POST
        host.encode("idna")  # an empty or overlong label raises here, not at the POST
        url.replace(parts.netloc, "", 1).encode("ascii")  # the path and query: percent-encoded, or no request
    except (ValueError, UnicodeError):
        return "its value is not a usable URL (a non-ASCII path or an empty host label): give it percent-encoded"
    if parts.username is not None or parts.password is not None:  # urllib would send them as the host name: no request
        return "its URL holds user:password@: give a URL without them (a token in its path or query is kept)"
    literal = address_literal(host)
    if parts.scheme == "https" and host:
        if literal is not None and not literal.is_global:  # the VPC, the metadata server: not a notification's
            return "its URL names a private address: give a public https URL"
        if literal is None and private_name(host):
            return "its URL names a host of this machine or network: give a public https URL"
        return None
    if parts.scheme == "http" and host:
        if host == "localhost" or (literal is not None and literal.is_loopback):  # a local sink
            return None
        return "its URL is plain http: give an https URL"
    return "its value is not an https URL"


# -- what an answer means -------------------------------------------------------------------------
Verdict = Literal["sent", "refused", "retry"]


def verdict(status: int) -> Verdict:
    """2xx: sent; 408, 425, 429 and 5xx: try again (Pub/Sub redelivers); any other 4xx (and 3xx, not
    followed): refused, recorded, never retried: the same request will be refused again."""
    if 200 <= status < 300:
        return "sent"
    if status in (408, 425, 429) or status >= 500:
        return "retry"
    return "refused"


# -- what can go wrong on the way ------------------------------------------------------------------
class DeliveryRefused(Exception):
    """This target will never take this notice (its secret is unreadable or holds no usable URL, a 4xx):
    recorded, not retried. Its text never quotes a URL."""


class DeliveryFailed(Exception):
    """Not now (no answer, a 5xx, Secret Manager unavailable): the event is retried. Never quotes a URL."""


class NoAnswer(DeliveryFailed):
    """The endpoint gave no answer at all: no connection, or none within the POST's time. Its next notices are
    held back a while (``zen.jobs.notifications``): it would most likely keep a request waiting again."""
