"""Who is looking at the console and what they may see. The rules are the queues' (``zen.jobs.authorization``,
docs/how-to/queues.md#who-may-use-a-queue): a viewer sees their own jobs and every job of the queues they
belong to (those they may submit to: the queue's users, submitters and admins, or anyone when it names no
submitters); Zen's ``auth.admins`` see every job; without queues everyone sees every job. Queues, clusters
and usage totals are every viewer's to see: they name no job.

Where the principal comes from: in production, Identity-Aware Proxy's signed header
(``zen.adapters.iap``); on a local stack, ``$ZEN_AS`` (else ``$USER``), as ``zen submit`` says who it is
there, with an ``X-Zen-As`` header taking its place (tests open the console as several people).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from zen.core.config import ZenConfig
from zen.core.errors import Rejected
from zen.core.models import LOWEST_PRIORITY, Job
from zen.jobs.authorization import may_submit

LOCAL_HEADER = "X-Zen-As"


class NoIdentity(Rejected):
    """The request names no viewer at all (answered 401; a forged or foreign one is 403)."""


@dataclass(frozen=True)
class Viewer:
    principal: str
    sees_all: bool
    queues: tuple[str, ...]  # the queues whose jobs it sees (besides its own)
    source: str  # where the principal came from, shown in the page's header

    @property
    def scope(self) -> tuple[str, list[str]] | None:
        """What ``repository.recent_jobs(viewer=...)`` narrows to; None for every job."""
        return None if self.sees_all else (self.principal, list(self.queues))

    def may_see(self, job: Job) -> bool:
        return (self.sees_all or job.user_id.lower() == self.principal.lower()
                or (job.queue is not None and job.queue in self.queues))


def viewer_of(config: ZenConfig, principal: str, source: str) -> Viewer:
    sees_all = not config.queues or bool(config.auth.admin(principal))
    queues = tuple(q.name for q in config.queues if may_submit(config, principal, q.name, LOWEST_PRIORITY) is None)
    return Viewer(principal, sees_all, queues, source)


class Identify(Protocol):
    def __call__(self, headers: Any) -> tuple[str, str]:
        """(principal, where it came from) of a request (``headers``: its headers, anything with ``get``);
        ``zen.core.errors.Rejected`` when it proves none."""
        ...


def local_identity(default: str | None = None, hosts: tuple[str, ...] = ()) -> Identify:
    """A local stack's viewer: ``X-Zen-As``, else ``default``, ``$ZEN_AS`` or ``$USER``; for requests sent to
    this machine by name only (``Host``: a loopback name or address, or one of ``hosts``, the address it
    listens on; any, when that is a wildcard). A page whose own name a DNS server points at 127.0.0.1 is
    then refused: else its scripts, same-origin with it, could read the console as anyone they name."""
    who = default or os.environ.get("ZEN_AS") or os.environ.get("USER") or getpass.getuser()
    names = {"localhost", "127.0.0.1", "::1", *(h.strip("[]").lower() for h in hosts)}

    def identify(headers: Any) -> tuple[str, str]:
        sent = (headers.get("Host") or "").strip().lower()
        name = sent[1:].partition("]")[0] if sent.startswith("[") else sent.rpartition(":")[0] if ":" in sent else sent
        if not names & {"0.0.0.0", "::"} and name not in names:
            raise Rejected(f"this console answers requests sent to {', '.join(sorted(names))} only (Host "
                           f"{sent[:80]!r}): open it by one of those names")
        asked = (headers.get(LOCAL_HEADER) or "").strip()
        if asked:
            return asked[:200], f"the {LOCAL_HEADER} header (a local stack)"
        return who, "$ZEN_AS or $USER (a local stack)"

    return identify


def iap_identity(verify: Callable[[str | None], str]) -> Identify:
    """A deployed console's viewer: the e-mail of IAP's verified assertion (``IapAssertions.email``)."""
    from zen.adapters.iap import HEADER

    def identify(headers: Any) -> tuple[str, str]:
        assertion = headers.get(HEADER)
        if not assertion:
            raise NoIdentity(f"no {HEADER} header: the console is reached through Identity-Aware Proxy only")
        return verify(assertion), "Identity-Aware Proxy"

    return identify
