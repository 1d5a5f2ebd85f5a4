"""The job store port: everything the job service asks of its database, as a few narrow Protocols.

A ``JobStore`` opens units of work (``transaction()``, ``session()``), writes common submissions with
group commit (``submissions()``) and holds the tick lock (``tick_lock()``); inside a unit, a ``JobTx``
reads and writes jobs, history, early stops, the tick's clock, the outbox, admission, usage, refused
messages and the few fleet rows a start and a claim depend on. Adapters: ``zen.store.jobstore``
(Postgres) and ``zen_dev.fakes.jobstore`` (tests). The semantics every store keeps, checked on both:
docs/how-to/test.md, "the job store port".
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol, Sequence

from zen.core.models import Job, JobStatus
from zen.jobs.outgoing import Enqueued, OutgoingMessage
from zen.jobs.store_hooks import StoreHooks as StoreHooks, hooked as hooked  # (zen.store reaches them here)

if TYPE_CHECKING:
    from zen.core.prices import AttemptPrice


class ConcurrentChange(RuntimeError):
    """The row changed between read and write: a bug, since rows are locked (rolls back)."""


def repeat_key(vm: str, job_id: str, attempt: int, cause: str) -> str:
    """The key that makes a VM's refused report about one attempt one row however often it comes."""
    return f"{vm}/{job_id}/{attempt}/{cause}"


class JobRows(Protocol):
    def get_job(self, job_id: str, *, lock: bool = False) -> Job | None:
        """The job (``lock``: its row held until the unit of work ends), or None."""

    def insert_job(self, job: Job) -> bool:
        """Insert a new job; False when its job_id exists already (a redelivery or a reuse)."""

    def save_job(self, before: Job, after: Job, path: list[JobStatus], now: datetime) -> None:
        """Write ``after`` over the row read as ``before`` (its status and attempt still); ``path``: the
        statuses it went through, each step legal. Else ``ConcurrentChange``."""

    def add_job_events(self, rows: list[dict[str, Any]]) -> None:
        """History rows (``job_id, at, actor, attempt, from_status, to_status, reason``), in order."""

    def job_history(self, job_id: str) -> list[dict[str, Any]]:
        """The job's history rows, in the order written."""

    def record_progress(self, *, job_id: str, attempt: int, vm: str, seq: int, message: str | None,
                        now: datetime, vm_since: datetime | None = None) -> bool:
        """A RUNNING heartbeat of the running attempt from its VM (made by ``vm_since``), newer than the last."""

    def held_jobs_silent_since(self, cutoff: datetime, limit: int, stop_cutoff: datetime | None = None,
                               preempted_cutoff: datetime | None = None, timeout_s: float | None = None) -> list[str]:
        """Held jobs silent since before ``cutoff`` (STOPPING: ``stop_cutoff`` or ``preempted_cutoff``; a running one
        whose agent fences from longer than ``timeout_s``, its ``fence_timeout_s``: that much longer), oldest first."""

    def queued_jobs_published_before(self, cutoff: datetime, limit: int) -> list[str]:
        """QUEUED jobs whose start went out before ``cutoff``, longest-waiting first."""

    def queued_jobs_to_widen(self, now: datetime, limit: int) -> list[str]:
        """QUEUED jobs whose ``widen_at`` is due, longest-narrowed first."""

    def gangs_assembling_in(self, cluster: str, regions: list[str], limit: int) -> list[str]:
        """The cluster's gangs assembling (QUEUED, a node claimed) in one of ``regions``."""

    def queued_jobs_uncleared(self, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
        """The cluster's QUEUED jobs (no gang node claimed) allowed a region whose tags (``carried``: region -> the
        tags its VMs carry now) lack some their request requires, oldest first."""

    def queued_jobs_short(self, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
        """Such jobs whose request names no regions, not yet allowed a region of ``carried`` carrying their tags."""

    def queued_jobs_gpus_above(self, cluster: str, gpu_count: int, limit: int) -> list[str]:
        """The cluster's QUEUED jobs (no gang node claimed) asking more GPUs of one VM than ``gpu_count``, oldest first."""

    def queued_jobs_of_other_clusters(self, clusters: list[str], limit: int) -> list[str]:
        """The QUEUED jobs (no gang node claimed) of a cluster not among ``clusters``, oldest first."""

    def queued_jobs_unfit(self, cluster: str, models: list[str], flex_run_s: int, most_nodes: int, regions: list[str],
                          limit: int, flex_alone: bool = False) -> list[str]:
        """The cluster's QUEUED jobs (no gang node claimed) accepting one model of ``models`` alone, or flex-start alone
        (any model too, where ``flex_alone``: flex-start the cluster's only one) with a named ``max_runtime_s`` above
        ``flex_run_s``, or of more nodes than ``most_nodes``, or allowed none of ``regions`` (of those that named
        regions), oldest first (``zen.jobs.stranding``)."""

    def queued_jobs_outranking(self, cluster: str, priority: int, vm: str, now: datetime, limit: int) -> list[Job]:
        """The cluster's QUEUED single-VM jobs (no gang) of higher ``priority``, not offered to VMs but ``vm`` now
        (``start_vms``, unless their ``widen_at`` is due), highest priority first, then oldest, ``limit`` (unlocked)."""

    def lock_job_unless_held(self, job_id: str) -> Job | None:
        """The job, its row held until the unit of work ends; None where it does not exist or another unit holds it."""

    def pending_jobs(self, limit: int, queue_less: bool = False) -> list[str]:
        """PENDING jobs without a hold, oldest first (``queue_less``: only those of no queue)."""


class EarlyStops(Protocol):
    def remember_early_stop(self, job_id: str, reason: str, now: datetime, principal: str | None = None) -> None:
        """Keep a stop for a job not known yet, with its proven sender (a sender's first is kept)."""

    def take_early_stops(self, job_id: str) -> list[tuple[str, str | None]]:
        """The kept stops' (reason, sender), the first kept first, consumed."""

    def kept_stop_names(self, job_id: str) -> list[str]:
        """Of ``job_id`` and its array's id (a task's), those a stop is kept for (not consumed)."""

    def forget_early_stops(self, cutoff: datetime) -> None:
        """Drop stops kept before ``cutoff``."""

    def early_stops_of_submitted_jobs(self, limit: int) -> list[str]:
        """Jobs (or arrays) that exist although a stop for them was kept (raced its submit), oldest stop first."""


class ProbeLook(NamedTuple):
    """The tick's look at its last probe of the heartbeat path (``zen.jobs.probes``)."""

    back_at: datetime | None  # when silences count from (the end of the last gap in the ticks, or stall of the path)
    publish: bool  # a new probe is due (its nonce and time kept): publish it
    late: bool  # the last probe was unheard past the margin (while probes have come through before)
    seen: bool  # a probe has ever come through
    sent_at: datetime | None  # when the probe looked at was published
    vouched_at: datetime | None  # when the latest probe heard was sent (or one not published): silences count to then
    lag_s: float | None = None  # the largest recent delivery lag of a report (probes.heard_late), seen at lag_at
    lag_at: datetime | None = None


class TickClock(Protocol):
    def record_tick(self, now: datetime, gap_s: float) -> datetime | None:
        """Record this tick; when Zen came back after its last gap longer than ``gap_s`` (None: none seen)."""

    def look_at_probe(self, now: datetime, late_s: float, stale_s: float, nonce: str) -> ProbeLook:
        """After ``record_tick``: whether the last probe is unheard ``late_s`` after it was sent (and probes were
        heard before), and how far the path is vouched for; a probe is due (``nonce`` kept as the next one's, sent
        ``now``) once the last one was heard or is unheard ``stale_s`` after it was sent (kept then as the previous
        one), or none was sent."""

    def probe_unsent(self, nonce: str) -> None:
        """The probe ``nonce`` could not be published: it vouches for nothing, and is no probe if it comes."""

    def probe_heard(self, nonce: str, now: datetime) -> float | None:
        """The probe ``nonce`` heard: its lag in seconds when it is the last one sent and not heard before, or the
        previous one replaced unheard (None: another); the path is vouched for up to when it was sent."""

    def heard_late(self, lag_s: float, now: datetime, fresh_s: float) -> None:
        """A report came through ``lag_s`` after Pub/Sub accepted it: kept when above the lag kept, or that one is
        more than ``fresh_s`` older or later (a clock stepped back) than ``now`` (``ProbeLook.lag_s``)."""


class OutboxRows(Protocol):
    def add_outbox(self, messages: Sequence[OutgoingMessage], now: datetime) -> list[int]:
        """Messages to publish after commit; their ids, growing in the messages' order."""

    def unsent_outbox(self, cutoff: datetime, limit: int) -> list[Enqueued]:
        """Rows to resend, held until the unit ends: failed ones, and those created before ``cutoff``
        (least tried first, then oldest); rows another unit holds are skipped."""

    def mark_outbox_sent(self, ids: list[int], now: datetime, *, durable: bool = True) -> None:
        """``durable=False``: the mark may be lost in a crash (the row is then sent once more)."""

    def mark_outbox_failed(self, id_: int, error: str) -> None: ...

    def prune_outbox(self, cutoff: datetime, limit: int) -> int:
        """Delete at most ``limit`` rows sent before ``cutoff``; how many went."""


class AdmissionRows(Protocol):
    def queue_lock(self, key: str) -> None:
        """Admission for ``key`` one unit of work at a time (held until it ends)."""

    def admitted(self, queues: list[str], cluster: str) -> list[dict[str, Any]]:
        """Per queue holding quota on ``cluster``: ``queue``, ``gpus``, ``jobs``, ``freeing`` (of STOPPING jobs)."""

    def preemption_candidates(self, queues: list[str], cluster: str, limit: int) -> list[Job]:
        """Admitted jobs of ``queues`` not being preempted, cheapest first (``limit`` a queue), held (others skipped)."""

    def pending_of_queue(self, queue: str, cluster: str, limit: int, most: int) -> list[Job]:
        """The queue's PENDING jobs of ``cluster`` of at most ``most`` GPUs in admission order, held, up to
        the first one held elsewhere."""

    def waiting_queues(self) -> list[tuple[str, str]]:
        """(queue, cluster) pairs with PENDING jobs."""

    def queue_head(self, queue: str, cluster: str, most: int) -> tuple[str, int] | None:
        """The first PENDING job of ``queue`` on ``cluster`` of at most ``most`` GPUs (job id, GPUs), unlocked."""

    def jobs_ahead(self, job: Job, most: int) -> int:
        """PENDING jobs of the job's queue and cluster of at most ``most`` GPUs admitted before it."""

    def queue_usage(self, queues: list[str]) -> dict[tuple[str, str], tuple[float, datetime]]:
        """(queue, cluster) -> (decayed GPU-seconds, when last brought up to date)."""

    def save_queue_usage(self, queue: str, cluster: str, gpu_seconds: float, now: datetime) -> None: ...

    def queue_counts(self) -> list[dict[str, Any]]:
        """Per (queue, cluster): ``pending``, ``admitted_waiting``, ``running``, ``admitted_gpus``."""


class UsageRows(Protocol):
    def record_attempt(self, job: Job, *, outcome: str, machine_type: str | None, gpus: int,
                       ran_from: datetime | None, now: datetime, vm_share: float = 1.0,
                       price: AttemptPrice | None = None, gpu_factor: float = 1.0) -> bool:
        """The usage of ``job``'s current attempt, ending now (from its last claim, else ``ran_from``), with
        its model and price now (``price``), its GPU-seconds ``gpus`` x wall time x ``gpu_factor`` (a gang's
        nodes that ended early: ``zen.jobs.decisions``); False when recorded already."""

    def lost_attempt(self, job_id: str, attempt: int) -> dict[str, Any] | None:
        """The attempt if recorded LOST or PREEMPTED: ``vm``, ``started_at``, ``outcome``, ``by_sweep``,
        ``later_held``, ``unspent``; else None."""

    def record_late_outcome(self, job_id: str, attempt: int, outcome: str) -> bool:
        """A LOST or PREEMPTED attempt's row says ``outcome`` instead; False when it says neither."""


class RejectionRows(Protocol):
    def record_rejection(self, *, source: str, message_id: str, job_id: str | None, reason: str,
                         payload: bytes, now: datetime, key: str | None = None, principal: str | None = None,
                         named_job_id: str | None = None) -> bool:
        """Record a refused message (and its proven sender, if any; ``named_job_id``: the job id it named, when the
        refusal is not that job's: ``zen.jobs.rejections``); True: a new row (not a repeat of ``key``, nor the same)."""

    def rejection_last_seen(self, source: str, key: str) -> datetime | None:
        """When a refusal of ``key`` was last recorded; None: never."""


class FleetRows(Protocol):
    def blocked_regions(self, cluster: str, now: datetime, since: datetime | None = None) -> set[str]:
        """The cluster's regions blocked by a stockout until after ``now`` (the planner's memory); with
        ``since``, also those where the planner last found a stockout after then and no VM booted since."""

    def gang_rooms(self, cluster: str) -> dict[str, tuple[int, datetime | None]]:
        """Pool -> (the VMs a gang assembling there could still get at the planner's last pass there (its memory's
        ``gang_room``: idle, booting, room under limits), when it read the fleet and jobs (None: unrecorded)); or absent."""

    def vms_holding(self, cluster: str, regions: list[str], inputs: list[str], image: str | None,
                    now: datetime, limit: int = 20) -> list[tuple[str, str, bool, str | None]]:
        """(name, region, offered, model: ``vm_model``'s) of idle, recently heard, undrained VMs holding no job whose
        warm cache holds all of ``inputs`` (non-empty) or ``image``; those not offered first, then the latest heard."""

    def upsert_vm(self, *, name: str, cluster: str, region: str, zone: str, state: str, job_id: str | None,
                  attempt: int | None, seq: int, sent_at: datetime, now: datetime, created: datetime | None = None,
                  jobs: list[dict[str, Any]] | None = None, cached_inputs: list[str] | None = None,
                  images: list[str] | None = None, heard_at: datetime | None = None) -> str | None:
        """Record a VM heartbeat (a RETIRED kept for the VM created at ``created``, older or not): the VM's state before
        ('' when new), or None when older than the last (``heard_at`` still counts: a clock stepped back, restarted)."""

    def vm_is_draining(self, vm: str, seq: int) -> bool:
        """Whether ``vm`` is drained, retired by its agent before ``seq`` (a claim's), or gone from its MIG; locked."""

    def vm_retired_before(self, vm: str, created: datetime | None) -> bool:
        """Whether ``vm``'s VM created at ``created`` said RETIRED, whatever since (``created`` None: False)."""

    def jobs_on_vm(self, vm: str) -> dict[str, int]:
        """Job id -> GPUs held, for the jobs ``vm`` holds (ASSIGNED, RUNNING or STOPPING)."""

    def vm_model(self, vm: str, ran_from: datetime | None = None) -> str | None:
        """The model a pass recorded for ``vm``; None: none, or that VM seen stopped (not after ``ran_from``: recreated)."""

    def vm_run_marks(self, vm: str) -> tuple[datetime | None, datetime | None]:
        """When ``vm``'s agent was first heard, and a pass first saw it RUNNING (a flex-start run's start); None: not yet."""

    def vm_stop_seen(self, vm: str, since: datetime) -> tuple[str | None, datetime | None, bool] | None:
        """(model, run start, left its MIG) of ``vm`` seen stopped after ``since``, not by Zen (``cloud_silence``)."""

    def vm_outside_mig(self, vm: str, sent_before: datetime) -> tuple[datetime, float | None] | None:
        """(when, its price an hour or None) ``vm`` left its MIG, seen before ``sent_before`` and listed by none since."""

    def vm_shares(self, vm: str) -> bool | None:
        """Whether ``vm``'s agent may run several jobs at once (its VM heartbeats list them); None: never heard."""

    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        """Mark ``vm`` for a scale-down unless it holds a job (``zen.store.fleet.drain_unless_busy``); True: drained."""


class ArrayRows(Protocol):
    """An array's tasks (``zen.jobs.arrays``): its ``array_id`` is its request's ``array.id``."""

    def array_let_go(self, array_id: str) -> int:
        """Tasks of the array with no hold that have not ended (what its max_parallel counts)."""

    def array_next_held(self, array_id: str) -> Job | None:
        """The held PENDING task of the lowest index, its row locked; None when there is none (or a
        concurrent release took it)."""

    def arrays_holding(self, limit: int) -> list[str]:
        """Arrays that have held tasks and room under their ``max_parallel`` (``array_let_go``)."""

    def array_tasks(self, array_id: str) -> list[Job]:
        """The array's tasks in index order (no locks)."""

    def array_end(self, array_id: str) -> tuple[int, int, str | None]:
        """The array's tasks, how many have not ended, and the status of the first (by index) that did not
        succeed (None: none)."""

    def arrays_named(self, names: list[str]) -> list[str]:
        """Those of ``names`` that are an array's id (one with tasks)."""

    def lock_job_ids(self, job_ids: list[str]) -> None:
        """Wait for, then hold until the transaction ends, each of ``job_ids`` (in sorted order: no deadlock)."""

    def waiting_after(self, names: list[str]) -> list[Job]:
        """PENDING jobs waiting for one of ``names`` (jobs, arrays); with those waiting for them, locked as submitted."""

    def held_after(self, limit: int) -> list[str]:
        """Jobs held by dependencies that may move now (``dependencies.verdict`` says other than wait), oldest
        first: those surely still waiting never fill the ``limit``."""

    def retry_due(self, now: datetime, limit: int, kind: str, of_kind: bool) -> list[str]:
        """PENDING jobs whose retry's backoff is over (``hold_until`` <= ``now``), longest due first: those whose
        hold starts with ``kind`` when ``of_kind``, else the others."""


class JobTx(JobRows, EarlyStops, TickClock, OutboxRows, AdmissionRows, UsageRows, RejectionRows, FleetRows,
            ArrayRows, Protocol):
    """One unit of work of a ``JobStore``."""


class SubmissionWriter(Protocol):
    def write(self, job: Job, history: list[dict[str, Any]], messages: list[OutgoingMessage],
              now: datetime) -> list[Enqueued]:
        """Write a QUEUED submission with its history and messages (possibly sharing a commit with
        concurrent ones); its outbox rows, already handed to the writer's ``committed``, or [] when it
        was not written (its job_id exists, or a stop for it is kept)."""


class JobStore(Protocol):
    hooks: StoreHooks

    def transaction(self) -> AbstractContextManager[JobTx]:
        """A unit of work: committed at its end, rolled back on any error."""

    def session(self) -> AbstractContextManager[JobTx]:
        """Each call commits on its own (a lone statement)."""

    def submissions(self, committed: Callable[[list[Enqueued]], None]) -> SubmissionWriter:
        """The group-commit writer of submissions; ``committed`` gets the outbox rows of each commit."""

    def tick_lock(self, key: int) -> AbstractContextManager[bool]:
        """Held for the block when True; False: another tick holds it."""

    def prune_rejections(self, now: datetime) -> int:
        """Delete refusals past their retention, a batch a unit of work, within a time budget; how many."""
