"""Per-day pull limits of one agent (issue 15): after N jobs or G GPU-hours in a trailing 24 h, after
``MAX_VM_FAULTS`` attempts in a row given back for its own fault (staging failed by its disk or its own token
refused, its secrets' reads refused for its token), or with a job's container docker could not
remove, the agent takes no more jobs and its VM retires for good: an agent restarted on the same boot stays
retired (``remember_in``, ``zen.agent.retired``).

The rules (what counts, claims in flight, the window, counts in memory only, where each limit comes
from): docs/reference/agent.md, "with a pull limit"; the disk: docs/reference/messages.md, staging.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, overload

from zen.agent.identity import template_attribute
from zen.agent.retired import RetiredMark
from zen.agent.settings import AgentSettings, parse_limit
from zen.core.config import ClusterConfig, describe_pull_limits

if TYPE_CHECKING:
    from zen.agent.identity import Identity, MetadataServer

DAY_S = 86_400.0
JOBS_ATTRIBUTE = "zen-max-jobs-per-day"
GPU_HOURS_ATTRIBUTE = "zen-max-gpu-hours-per-day"
MAX_VM_FAULTS = 3  # attempts in a row given back for this VM's own fault (its disk, its token): then it retires


def token_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is this VM's own credentials failing a call: its token refused (401) or not had (the metadata
    server's token endpoint failing). A staging given back for it counts as one its disk failed (``staged``)."""
    from google.auth.exceptions import GoogleAuthError  # (google-auth: every Google client's)
    return getattr(exc, "code", None) == 401 or isinstance(exc, GoogleAuthError)


@dataclass(frozen=True)
class PullLimits:
    max_jobs: int | None = None  # attempts per trailing 24 h; None: no limit
    max_gpu_hours: float | None = None  # GPUs x hours per trailing 24 h; None: no limit

    def describe(self) -> str:
        return describe_pull_limits(self.max_jobs, self.max_gpu_hours)


class DailyPulls:
    """Counts the attempts one VM ran in a trailing window and says when it may take no more."""

    def __init__(self, limits: PullLimits, gpus: int, clock: Callable[[], float] = time.monotonic,
                 window_s: float = DAY_S):
        self.limits = limits
        self._gpus = gpus
        self._clock = clock  # seconds, any origin (the agent's monotonic clock)
        self._window_s = window_s
        self._ended: deque[tuple[float, float]] = deque()  # (ended at, GPU-seconds), oldest first
        self._running: dict[object, tuple[float, int]] = {}  # attempt -> (began at, its GPUs)
        self._claims: dict[object, None] = {}  # attempts whose claim waits for its answer
        self._reached: str | None = None
        self._vm_faults = 0  # attempts in a row given back for this VM's own fault (``staged``)
        self._mark: RetiredMark | None = None  # where the retirement is kept for the boot's next agents
        # Attempt threads begin and end while the agent's loop asks whether a limit is reached.
        self._lock = threading.RLock()

    def claimed(self, attempt: object = None) -> None:
        """``attempt`` is being claimed (its slot taken): ``blocked`` counts it until ``began`` or ``ended``."""
        with self._lock:
            self._claims[attempt] = None

    def began(self, attempt: object = None, gpus: int | None = None) -> None:
        """``attempt`` starts holding ``gpus`` of the VM's GPUs (None: all of them); its claim was confirmed."""
        with self._lock:
            self._claims.pop(attempt, None)
            self._running[attempt] = (self._clock(), self._gpus if gpus is None else gpus)

    def ended(self, attempt: object = None) -> None:
        """``attempt`` has ended: count it, with its GPUs x wall time (nothing when it never began:
        its claim was refused or unanswered)."""
        with self._lock:
            self._claims.pop(attempt, None)
            began = self._running.pop(attempt, None)
            if began is not None:
                now = self._clock()
                self.record(now, began[1] * max(0.0, now - began[0]))

    def staged(self, fault: str | None, of: str = "disk") -> None:
        """An attempt's staging worked (None), or this VM's own ``of`` failed it (why: its disk, or its credentials
        refused reading the job's secrets or staging, ``zen.agent.prestart``): ``MAX_VM_FAULTS`` in a row, of either,
        retire the VM for good."""
        with self._lock:
            self._vm_faults = 0 if fault is None else self._vm_faults + 1
            if self._vm_faults >= MAX_VM_FAULTS and self._reached is None:
                self._reach(f"{self._vm_faults} attempts in a row given back for this VM's own fault (the last: "
                            f"its {of}, {fault})")

    def retire(self, reason: str) -> None:
        """Take no more jobs, for good, for ``reason`` (e.g. a job's container docker could not remove:
        ``zen.agent.runner``); the first reason given stays."""
        with self._lock:
            if self._reached is None:
                self._reach(reason)

    def remember_in(self, mark: RetiredMark) -> None:
        """Keep the retirement in ``mark`` too, and take an earlier agent's of this boot: retired from the start."""
        earlier = mark.load()
        with self._lock:
            if earlier is not None and self._reached is None:
                self._reached = f"an earlier agent retired this VM: {earlier}"
            self._mark = mark

    def _reach(self, reason: str) -> None:
        self._reached = reason
        if self._mark is not None:
            self._mark.keep(reason)

    def record(self, ended_at: float, gpu_seconds: float) -> None:
        with self._lock:
            self._ended.append((ended_at, gpu_seconds))

    def jobs(self) -> int:
        with self._lock:
            self._forget_old()
            return len(self._ended) + len(self._running)

    def gpu_hours(self) -> float:
        with self._lock:
            self._forget_old()
            now = self._clock()
            running = [gpus * max(0.0, now - began) for began, gpus in self._running.values()]
            return math.fsum([gpu_seconds for _, gpu_seconds in self._ended] + running) / 3600.0

    def exhausted(self) -> str | None:
        """Why no more jobs may be taken (for good, once said), or None while another one may."""
        with self._lock:
            return self._exhausted()

    def blocked(self) -> str | None:
        """Why nothing may be pulled now: a limit reached (``exhausted``: for good), or the claims waiting
        for their answers would reach ``max_jobs`` if confirmed (until they are answered)."""
        with self._lock:
            reached = self._exhausted()
            if reached is None and self._claims and self.limits.max_jobs is not None:
                jobs = self.jobs() + len(self._claims)
                if jobs >= self.limits.max_jobs:
                    return f"{jobs} jobs in 24 h with the claims waiting for an answer (limit {self.limits.max_jobs})"
            return reached

    def _exhausted(self) -> str | None:
        if self._reached is None:
            limits, jobs, hours = self.limits, self.jobs(), self.gpu_hours()
            if limits.max_jobs is not None and jobs >= limits.max_jobs:
                self._reach(f"{jobs} jobs in 24 h (limit {limits.max_jobs})")
            elif limits.max_gpu_hours is not None and hours >= limits.max_gpu_hours:
                self._reach(f"{hours:.2f} GPU-hours in 24 h (limit {limits.max_gpu_hours:g})")
        return self._reached

    def _forget_old(self) -> None:
        cutoff = self._clock() - self._window_s
        while self._ended and self._ended[0][0] <= cutoff:
            self._ended.popleft()


@overload
def given_or_attribute(given: int | None, metadata: MetadataServer | None, identity: Identity,
                       attribute: str, *, integer: Literal[True]) -> tuple[bool, int | None]: ...
@overload
def given_or_attribute(given: int | float | None, metadata: MetadataServer | None, identity: Identity,
                       attribute: str, *, integer: bool) -> tuple[bool, int | float | None]: ...


def given_or_attribute(given: int | float | None, metadata: MetadataServer | None, identity: Identity,
                       attribute: str, *, integer: bool) -> tuple[bool, int | float | None]:
    """(found, value) from the first of two sources that has it: the agent's setting (``ZEN_AGENT_*``),
    then the template's instance attribute (on GCE only; set and empty: found, None). Not found:
    the caller falls back to the cluster's configuration."""
    if given is not None:
        return True, given
    raw = template_attribute(metadata, identity, f"instance/attributes/{attribute}")
    if raw is None:
        return False, None
    return True, parse_limit(f"instance attribute {attribute}", raw, integer=integer)


def resolve_pull_limits(settings: AgentSettings, metadata: MetadataServer | None, identity: Identity,
                        cluster: ClusterConfig) -> PullLimits:
    """Each limit from the first source that has it: the settings (``ZEN_AGENT_*``), the template's
    instance attribute (on GCE only; empty: no limit), the cluster's configuration."""

    def one(given, attribute: str, configured, integer: bool):
        found, value = given_or_attribute(given, metadata, identity, attribute, integer=integer)
        return value if found else configured

    return PullLimits(
        max_jobs=one(settings.max_jobs_per_day, JOBS_ATTRIBUTE, cluster.max_jobs_per_vm_day, True),
        max_gpu_hours=one(settings.max_gpu_hours_per_day, GPU_HOURS_ATTRIBUTE, cluster.max_gpu_hours_per_vm_day,
                          False),
    )
