"""Who this VM is: project, VM name, cluster, region, zone, tags; and whether it is being preempted, or terminated
for a host maintenance.

Each field comes from the environment when set (the local Compute stand-in sets them all), otherwise
from the GCE metadata server (``GCE_METADATA_HOST`` points elsewhere). :class:`ProofSource` fetches the
VM's identity token for an audience binding the agent's message key, and signs (or MACs) each
heartbeat it attaches it to (``zen.adapters.message_key``).
Fields and sources: docs/reference/agent.md#who-the-vm-is
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable, Mapping

from zen.adapters.message_key import IDENTITY_PATH, MessageKey, identity_query
from zen.adapters.vm_proof import unverified_claims
from zen.core.config import TAG_PATTERN
from zen.core.errors import ZenError

log = logging.getLogger("zen.agent.identity")
METADATA_HOST = "metadata.google.internal"


class IdentityError(ZenError):
    """The VM's identity cannot be determined."""


class MetadataUnavailable(IdentityError):
    """The metadata server gave no answer to go by (any status but 200 and 404, a timeout, no connection, an answer
    cut off or malformed: http.client's own errors, no OSError): maybe only for a moment (GCE asks its callers to
    retry; a VM's boot may meet it so)."""


FIRST_PAUSE_S = 0.5  # between a retried read's tries (``MetadataServer.wait_s``), doubling
LONGEST_PAUSE_S = 8.0


@dataclass(frozen=True)
class Identity:
    project: str
    vm: str
    cluster: str
    region: str
    zone: str
    from_environment: bool  # every field came from the environment (the local stack, tests)
    tags: tuple[str, ...] = ()  # execution groups, reported in job heartbeats (see zen.jobs.placement)
    ip: str | None = None  # its internal address, sent with a claim: a gang's nodes find each other by it (zen.core.gang)

    def log_fields(self) -> dict[str, str]:
        return {"vm": self.vm, "cluster": self.cluster, "region": self.region}


def region_of_zone(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    region, sep, suffix = zone.rpartition("-")
    if not sep or not region or len(suffix) != 1:
        raise IdentityError(f"{zone!r} does not look like a zone (e.g. us-central1-a)")
    return region


class MetadataServer:
    """A small adapter over the GCE metadata server (plain HTTP, header ``Metadata-Flavor: Google``). A read the
    server gives no answer to (``MetadataUnavailable``) is tried again for ``wait_s`` (0: once), pausing
    ``FIRST_PAUSE_S``, then twice as long each time, up to ``LONGEST_PAUSE_S``."""

    def __init__(self, host: str = METADATA_HOST, timeout_s: float = 5.0, wait_s: float = 0.0):
        self.host, self.base_url = host, f"http://{host}/computeMetadata/v1/"
        self.timeout_s, self.wait_s = timeout_s, wait_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MetadataServer":
        return cls(env.get("GCE_METADATA_HOST") or METADATA_HOST)

    def waiting(self, wait_s: float) -> "MetadataServer":
        """This server, its reads tried again for ``wait_s`` while it gives no answer."""
        return MetadataServer(self.host, self.timeout_s, wait_s)

    def get(self, path: str, *, timeout_s: float | None = None) -> str | None:
        """The value at ``path``; ``None`` when the server says it does not exist (404)."""
        return self.fetch(path, timeout_s=timeout_s)[0]

    def fetch(self, path: str, *, timeout_s: float | None = None) -> tuple[str | None, str | None]:
        """The value at ``path`` (``None``: 404) and its ETag, which a ``wait_for_change`` request names as
        ``last_etag`` to wait for a change from the value read, not from the one it finds."""
        deadline, pause = time.monotonic() + self.wait_s, FIRST_PAUSE_S
        while True:
            try:
                return self._fetch(path, timeout_s)
            except MetadataUnavailable as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("metadata server gave no answer; trying again", extra={"path": path, "error": str(exc),
                                                                                   "pause_s": pause})
                time.sleep(pause)
                pause = min(2 * pause, LONGEST_PAUSE_S)

    def _fetch(self, path: str, timeout_s: float | None) -> tuple[str | None, str | None]:
        request = urllib.request.Request(self.base_url + path, headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                if response.headers.get("Metadata-Flavor") != "Google":
                    raise IdentityError(f"{self.base_url} did not answer as a metadata server")
                return response.read().decode(), response.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None, None
            raise MetadataUnavailable(f"metadata server: {path}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise MetadataUnavailable(f"metadata server unreachable at {self.base_url} ({exc})") from None
        except http.client.HTTPException as exc:  # no OSError: one ended the notice watch
            raise MetadataUnavailable(f"metadata server: {path}: no answer ({exc!r})") from None

    def required(self, path: str) -> str:
        value = self.get(path)
        if not value:
            raise IdentityError(f"metadata server has no {path}")
        return value.strip()


def resolve_identity(env: Mapping[str, str], metadata: MetadataServer | None = None,
                     default_project: str | None = None) -> Identity:
    """The environment first, field by field; the metadata server only for what is missing."""
    vm = env.get("ZEN_VM_NAME", "").strip()
    zone = env.get("ZEN_ZONE", "").strip()
    region = env.get("ZEN_REGION", "").strip()
    cluster = env.get("ZEN_CLUSTER", "").strip()
    project = env.get("ZEN_PROJECT", "").strip()
    ip = env.get("ZEN_VM_IP", "").strip() or None
    from_environment = bool(vm and zone and cluster)
    if not from_environment:
        if metadata is None:
            missing = [n for n, v in (("ZEN_VM_NAME", vm), ("ZEN_ZONE", zone), ("ZEN_CLUSTER", cluster)) if not v]
            raise IdentityError(f"set {', '.join(missing)} (or run on a GCE VM with a metadata server)")
        vm = vm or metadata.required("instance/name")
        zone = zone or metadata.required("instance/zone").rsplit("/", 1)[-1]
        cluster = cluster or (metadata.get("instance/attributes/zen-cluster") or "").strip()
        if not cluster:
            raise IdentityError("no cluster: set the instance attribute zen-cluster (or ZEN_CLUSTER)")
        project = project or (metadata.get("project/project-id") or "").strip()
        ip = ip or (metadata.get("instance/network-interfaces/0/ip") or "").strip() or None
    region = region or region_of_zone(zone)
    if not zone.startswith(region + "-"):
        raise IdentityError(f"zone {zone} is not in region {region}")
    project = project or default_project or ""
    if not project:
        raise IdentityError("no project: set ZEN_PROJECT")
    return Identity(project=project, vm=vm, cluster=cluster, region=region, zone=zone,
                    from_environment=from_environment, ip=ip)


def template_attribute(metadata: MetadataServer | None, identity: Identity, path: str) -> str | None:
    """An instance attribute its template set, by metadata ``path`` (None when unset or not on GCE)."""
    if identity.from_environment or metadata is None:
        return None
    return metadata.get(path)


def resolve_tags(env: Mapping[str, str], metadata: MetadataServer | None, identity: Identity,
                 configured: list[str]) -> tuple[str, ...]:
    """The VM's execution groups. An attribute that is set, even empty, is authoritative: the VM is
    in exactly the groups its template says; only without one does the configuration decide."""
    raw = env.get("ZEN_VM_TAGS")
    if raw is None:
        raw = template_attribute(metadata, identity, "instance/attributes/zen-tags")
    if raw is None:
        return reportable_tags(configured)
    return reportable_tags([tag.strip() for tag in raw.split(",") if tag.strip()])


MAX_TAGS = 64  # Heartbeat.tags


def reportable_tags(tags: list[str]) -> tuple[str, ...]:
    """The tags a heartbeat can carry, sorted: those named as the configuration names tags (lowercase
    letters, digits and '-', at most 41 characters: ``zen.core.config.TAG_PATTERN``, which every tag a job
    may require follows), at most ``MAX_TAGS``. The rest are dropped with a warning: one tag the
    heartbeat refused made every report of the VM fail, and its jobs were lost and rerun."""
    kept = sorted({tag for tag in tags if TAG_PATTERN.fullmatch(tag)})
    dropped = sorted(set(tags) - set(kept)) + kept[MAX_TAGS:]
    if dropped:
        log.warning("VM tags dropped: not tags a job could require, or too many", extra={
            "dropped": [tag[:60].encode("unicode_escape").decode("ascii") for tag in dropped[:8]],
            "count": len(dropped)})
    return tuple(kept[:MAX_TAGS])


PREEMPTED = "instance/preempted"  # TRUE once GCE preempts the VM (its ACPI soft off comes with it)
MAINTENANCE_EVENT = "instance/maintenance-event"
TERMINATE_ON_HOST_MAINTENANCE = "TERMINATE_ON_HOST_MAINTENANCE"
_SAID = {PREEMPTED: "metadata server reports this VM preempted",
         MAINTENANCE_EVENT: "metadata server reports a host maintenance: GCE stops this VM within the hour"}


def watch_notice(metadata: MetadataServer, key: str, notice: str, on_notice: Callable[[], None],
                 stop: threading.Event, *, wait_s: float = 60.0, error_pause_s: float = 5.0) -> threading.Thread:
    """Call ``on_notice`` once when the metadata server's ``key`` says ``notice``: ``instance/preempted`` TRUE (a spot
    VM's preemption: GCE stops it about 30 s later), or ``instance/maintenance-event``
    ``TERMINATE_ON_HOST_MAINTENANCE`` (a VM with GPUs cannot live-migrate, and GCE stops it for a host maintenance
    within the hour after this notice; a standard VM restarts, under its name). The agent shuts down at a preemption's
    notice (``zen.agent.shutdown``: its jobs' last checkpoint save, PREEMPTED), and takes no more jobs at a
    maintenance's, its jobs running on to GCE's stop (``zen.agent.__main__._maintenance``).

    Runs in a daemon thread until ``stop`` is set. Each long poll names the ETag of the value last read, so a notice
    that came between two polls, or during an error's pause, answers the next at once (a poll from the value it finds
    would wait past the VM's end). Errors are logged; after one, and from a server without the key (404), the key is
    read again after a pause.
    """

    def watch() -> None:
        etag: str | None = None
        read = False  # the key read once: long polls from then on
        while not stop.is_set():
            try:
                path = key
                if read:
                    path += f"?wait_for_change=true&timeout_sec={int(wait_s)}" + (
                        f"&last_etag={urllib.parse.quote(etag)}" if etag else "")
                value, etag = metadata.fetch(path, timeout_s=wait_s + 5 if read else None)
            except IdentityError as exc:
                log.warning("metadata notice check failed; retrying", extra={"key": key, "error": str(exc)})
                read = False
                stop.wait(error_pause_s)
                continue
            if value is None:
                read = False
                stop.wait(error_pause_s)
                continue
            read = True
            if value.strip().upper() == notice:
                log.warning(_SAID.get(key, f"metadata server: {key} is {notice}"))
                on_notice()
                return

    thread = threading.Thread(target=watch, name=f"zen-watch-{key.rsplit('/', 1)[-1]}", daemon=True)
    thread.start()
    return thread


PROOF_MODE = "zen-vm-proof"  # the instance attribute: Zen's vm_proof (off / required)


class ProofSource:
    """This VM's identity token for heartbeats (``zen.adapters.vm_proof``), bound to this agent's message key
    (made at the first fetch, or given): fetched once, kept until
    ``refresh_before_s`` before it expires (tokens last an hour). A fetch that fails is logged and
    not tried again for ``retry_pause_s``; meanwhile the token kept is used while it lasts, and with
    none no heartbeat goes (``PubSubTransport.publish`` retries within the report's budget): Zen would
    reject one without a token and ack it. Unless ``required`` is False (Zen runs ``vm_proof = off``):
    then a heartbeat goes without the token it could not get.

    A token lasts its lifetime (``exp - iat``, Google's clock) from when it was fetched, counted on ``clock``
    (monotonic): judged on this VM's wall clock, a clock 10 minutes behind sent heartbeats with an expired
    token for 10 minutes; Pub/Sub took them, renewing the attempt's lease (``zen.agent.fence``), while Zen
    refused them all, took the attempt for lost and ran it again beside the job still running here."""

    def __init__(self, metadata: MetadataServer, project: str, *, refresh_before_s: float = 300.0,
                 retry_pause_s: float = 30.0, clock: Callable[[], float] = time.monotonic, required: bool = True,
                 key: MessageKey | None = None):
        self.required = required
        self._metadata = metadata
        self._project = project
        self._key = key
        self._refresh_before_s = refresh_before_s
        self._retry_pause_s = retry_pause_s
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = self._expires_at = float("-inf")

    @classmethod
    def from_env(cls, env: Mapping[str, str], identity: Identity) -> "ProofSource | None":
        """From ``ZEN_VM_PROOF_METADATA_HOST``, else the metadata server on GCE; None: no token to get.
        Required unless ``ZEN_VM_PROOF``, else the instance attribute ``zen-vm-proof``, says ``off``."""
        host = env.get("ZEN_VM_PROOF_METADATA_HOST", "").strip()
        if host:
            metadata = MetadataServer(host)
        elif identity.from_environment:
            return None  # not on GCE (tests, a local stack without proofs)
        else:
            metadata = MetadataServer.from_env(env)
        try:
            mode = env.get("ZEN_VM_PROOF") or template_attribute(metadata, identity,
                                                                 f"instance/attributes/{PROOF_MODE}")
        except IdentityError as exc:  # unreadable now: the safe mode (no heartbeat Zen would refuse)
            log.warning("Zen's vm_proof mode unknown; taking it as required", extra={"error": str(exc)[:300]})
            mode = None
        return cls(metadata, identity.project, required=(mode or "required").strip().lower() != "off")

    def next_fetch_in(self) -> float:
        """Seconds until :meth:`token` asks the metadata server again (0: at the next call)."""
        with self._lock:
            return max(0.0, self._refresh_at - self._clock())

    def attributes(self, token: str, data: bytes, attributes: Mapping[str, str]) -> dict[str, str]:
        """What a heartbeat of body ``data`` and ``attributes`` carries as its proof: ``token`` (from
        :meth:`token`, whose audience binds this agent's key), the key, and its signature (or its MAC,
        once Zen gave this key's MAC key: :meth:`learn`)."""
        assert self._key is not None, "token() makes the key before it asks for a token"
        return self._key.attributes(token, data, attributes)

    def learn(self, sealed: str) -> bool:
        """Take the MAC key a CONFIRM carries (``vm_mac_key``, encrypted to this agent's key: its
        messages are authenticated with it from then on); False when it does not decrypt."""
        return self._key is not None and self._key.learn(sealed)

    def token(self) -> str | None:
        with self._lock:
            now = self._clock()
            if now < self._refresh_at:
                return self._token if self._token and now < self._expires_at else None
            if self._key is None:
                self._key = MessageKey()  # once per agent: every token it asks for binds this key
            try:
                token = self._metadata.required(IDENTITY_PATH + identity_query(self._project, self._key.fingerprint))
                claims = unverified_claims(token)
                expires = now + float(claims["exp"]) - float(claims.get("iat", time.time()))
            except (IdentityError, ValueError, KeyError, TypeError) as exc:
                log.warning("no VM identity token; heartbeats go without one for now",
                            extra={"error": str(exc)[:300]})
                self._refresh_at = now + self._retry_pause_s
                return self._token if self._token and now < self._expires_at else None
            self._token, self._expires_at = token, expires
            self._refresh_at = max(now + self._retry_pause_s, expires - self._refresh_before_s)
            return token
