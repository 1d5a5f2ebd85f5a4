"""An attempt's lease, as numbers: how long an agent may go unheard before it must have stopped its job
(the fence), and before its VM counts as gone; and the configuration's ``deadlines`` (``Deadlines``),
whose periods are checked against these at load. Pure; the agent (``zen.agent.fence``) and the supervisor of each
job (``zen.agent.launch``) keep the fence, scaling (``zen.scaling.vms``) the VM's silence, and the lost-job sweep
(``zen.core.silence``) an attempt's.

Why the fence ends a job before Zen reruns it is written in ``zen.agent.fence``.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from zen.core.cluster_config import Strict

MARGIN_S = 15.0  # of Zen's deadline, kept after the fence and the stop grace (a quarter of it at most)
MIN_BEATS = 3  # the fence is never shorter than this many heartbeat periods
SILENT_BEATS = 3  # an agent unheard for this many VM heartbeat periods (and heartbeat_timeout_s) is gone
# Kept by the agent, after a stopped job's grace, for the rest of its output and its final report: a STOP's
# ``answer_within_s`` less this is when the upload after it is cut (``zen.agent.attempt``).
STOP_REPORT_S = 5.0
# Pub/Sub keeps a message at most 7 days; terraform keeps each start copy twice ``start_republish_s`` within that
# (pubsub.tf's start_retention_s: a copy outlives one republish period, the tick that republishes it late included),
# so the period is at most 6 days: the copies, kept 7 days, outlive it by a day. Longer, a queued job's start copies
# expired before the next republish, and it waited with none to pull.
MAX_RETENTION_S = 7 * 86400.0
MAX_START_REPUBLISH_S = MAX_RETENTION_S - 86400.0
# The longest ``heartbeat_timeout_s`` the configuration allows, and so the longest an agent's report may say its fence
# was computed from (``Heartbeat.heartbeat_timeout_s``): the most Zen waits for a silent attempt, whatever its agent says.
MAX_HEARTBEAT_TIMEOUT_S = 3600.0


def start_retention_s(start_republish_s: float) -> float:
    """How long a start subscription keeps a message (terraform's pubsub.tf ``start_retention_s``, and the local
    stack's: ``zen_dev.local.topology``): twice ``start_republish_s``, within Pub/Sub's 10 minutes to 7 days."""
    return min(max(2 * start_republish_s, 600.0), MAX_RETENTION_S)


def _room(heartbeat_timeout_s: float, stop_grace_s: float) -> float:
    """Zen's deadline less the stop grace and the margin: the longest fence that keeps the margin."""
    return heartbeat_timeout_s - stop_grace_s - probe_late_s(heartbeat_timeout_s)


def probe_late_s(heartbeat_timeout_s: float) -> float:
    """How late a report Pub/Sub accepted may reach Zen before the fence's arithmetic no longer holds: the margin
    (``zen.jobs.probes``: a probe of the heartbeat path later than this holds the lost-job sweep)."""
    return min(MARGIN_S, heartbeat_timeout_s / 4)


def fence_s(heartbeat_timeout_s: float, stop_grace_s: float, heartbeat_s: float) -> float:
    """Seconds without an accepted report after which an attempt's job is stopped::

        heartbeat_timeout_s - stop_grace_s - min(MARGIN_S, heartbeat_timeout_s / 4),
        never below MIN_BEATS heartbeat periods
    """
    return max(_room(heartbeat_timeout_s, stop_grace_s), MIN_BEATS * heartbeat_s)


def too_tight(heartbeat_timeout_s: float, stop_grace_s: float, heartbeat_s: float) -> bool:
    """Whether the floor decides: heartbeats too far apart (or a grace too long) for Zen's timeout, so
    that a job cut off from Zen would not be dead the margin before Zen may run it elsewhere."""
    return MIN_BEATS * heartbeat_s > _room(heartbeat_timeout_s, stop_grace_s)


def tight_reason(heartbeat_timeout_s: float, stop_grace_s: float, heartbeat_s: float) -> str | None:
    """What to change, when ``too_tight``; None when the periods leave the fence room."""
    if not too_tight(heartbeat_timeout_s, stop_grace_s, heartbeat_s):
        return None
    room = _room(heartbeat_timeout_s, stop_grace_s)
    most = room / MIN_BEATS
    return (f"a heartbeat every {heartbeat_s:g} s with a {stop_grace_s:g} s stop grace leaves no room for the fence "
            f"within heartbeat_timeout_s={heartbeat_timeout_s:g} (an agent cut off from Zen stops its job after "
            f"timeout - grace - margin = {room:g} s, which must be at least {MIN_BEATS} heartbeats): "
            + (f"heartbeat at most every {most:g} s, or " if most > 0 else "")
            + "shorten the stop grace or raise heartbeat_timeout_s")


def stop_reason(stop_timeout_s: float, stop_grace_s: float) -> str | None:
    """What to change when a user's stop would end its job CANCELLED ("no answer from" its VM) before the agent
    could answer: the stop grace and ``STOP_REPORT_S`` must end within ``stop_timeout_s``; None when they do."""
    if stop_grace_s + STOP_REPORT_S < stop_timeout_s:
        return None
    return (f"stop_timeout_s={stop_timeout_s:g} leaves no time for a stopped job's stop_grace_s={stop_grace_s:g} and "
            f"the agent's {STOP_REPORT_S:g} s for its output and final report: Zen would end every stopped job "
            f"CANCELLED (no answer from its VM) while it still saves and uploads; raise stop_timeout_s above "
            f"{stop_grace_s + STOP_REPORT_S:g} or shorten stop_grace_s below {stop_timeout_s - STOP_REPORT_S:g}")


def agent_silence_s(heartbeat_timeout_s: float, vm_heartbeat_s: float) -> float:
    """How long an agent may go unheard before its VM is no supply and, holding no job, is deleted:
    ``SILENT_BEATS`` VM heartbeats (two lost or late ones are no death; the agent also reports every change),
    and never less than ``heartbeat_timeout_s``, after which a job on a silent VM is LOST: a busy
    agent is not judged dead before its job is. 180 s by default."""
    return max(heartbeat_timeout_s, SILENT_BEATS * vm_heartbeat_s)


def vm_silence_reason(heartbeat_timeout_s: float, configured_vm_heartbeat_s: float,
                      vm_heartbeat_s: float) -> str | None:
    """What to change when an agent's own VM heartbeat period (``ZEN_AGENT_VM_HEARTBEAT_S``) does not fit
    ``SILENT_BEATS`` times within the silence Zen allows its VM (``agent_silence_s`` of the configuration's
    ``heartbeat_timeout_s`` and ``vm_heartbeat_s``), else Zen deletes its idle VM as silent between two of its
    heartbeats, or after one lost, a warm VM (``min_vms`` too) gone and booted again; None when it fits."""
    silence = agent_silence_s(heartbeat_timeout_s, configured_vm_heartbeat_s)
    if SILENT_BEATS * vm_heartbeat_s <= silence:
        return None
    return (f"ZEN_AGENT_VM_HEARTBEAT_S={vm_heartbeat_s:g} is too long for Zen's {silence:g} s of silence (the larger "
            f"of {SILENT_BEATS} x deadlines.vm_heartbeat_s={configured_vm_heartbeat_s:g} and "
            f"deadlines.heartbeat_timeout_s={heartbeat_timeout_s:g}), after which Zen deletes an idle VM as gone: "
            f"fewer than {SILENT_BEATS} of its heartbeats fit in it, so one or two late or lost end its VM; set "
            "ZEN_AGENT_VM_HEARTBEAT_S at most "
            f"{silence / SILENT_BEATS:g}, or deadlines.vm_heartbeat_s at least {vm_heartbeat_s:g}")


class Deadlines(Strict):
    """The configuration's ``deadlines`` (seconds): Zen's, and the agents' periods that must fit them."""

    heartbeat_timeout_s: float = Field(default=120, gt=0, le=MAX_HEARTBEAT_TIMEOUT_S,
                                       description="Silence after which a job is LOST")
    boot_timeout_s: float = Field(default=600, gt=0, description="A VM still booting after this is suspect")
    idle_timeout_s: float = Field(default=300, ge=0, description="Idle VMs are deleted after this")
    stop_timeout_s: float = Field(default=120, gt=0, description="STOPPING with no answer becomes CANCELLED")
    start_republish_s: float = Field(default=3600, gt=0, description="Republish an unclaimed job's start message")
    data_wait_s: float = Field(default=30, ge=0, description=(
        "A start sent first to its data's regions (zen.core.routing) is widened by the first tick after this; 0: never narrowed"))
    # The agents' periods, with the deadlines they must fit (zen.core.lease): checked against each other here.
    agent_heartbeat_s: float = Field(default=30, gt=0, description=(
        "A running attempt's heartbeat period (an agent's ZEN_AGENT_HEARTBEAT_S overrides it, checked the same)"))
    vm_heartbeat_s: float = Field(default=60, gt=0, description=(
        "An agent's VM heartbeat period; an agent unheard for 3 of them (at least heartbeat_timeout_s) is gone"))
    stop_grace_s: float = Field(default=10, ge=0, description="SIGTERM to SIGKILL when an agent stops a job")
    flex_end_margin_s: float = Field(default=900, ge=0, description=(
        "The end of a flex-start VM's run kept past a job's max_runtime_s, for its stop grace, last checkpoint, "
        "outputs' upload and final report: a VM with less left takes no such job (zen.core.provisioning.flex_too_short)"))

    @model_validator(mode="after")
    def _lease_fits(self) -> "Deadlines":
        reason = tight_reason(self.heartbeat_timeout_s, self.stop_grace_s, self.agent_heartbeat_s)
        if reason is not None:
            raise ValueError(reason)
        reason = stop_reason(self.stop_timeout_s, self.stop_grace_s)
        if reason is not None:
            raise ValueError(reason)
        if self.start_republish_s > MAX_START_REPUBLISH_S:
            raise ValueError(
                f"start_republish_s={self.start_republish_s:g} is above {MAX_START_REPUBLISH_S:g} (6 days): a start "
                f"message is kept twice that period, and Pub/Sub keeps one {MAX_RETENTION_S:g} s (7 days) at most, so "
                "a queued job's start would expire before it is published again, the job waiting with none to pull; "
                f"set it at most {MAX_START_REPUBLISH_S:g}")
        return self

    @property
    def preempted_stop_s(self) -> float:
        """How long after its STOP a job its queue takes back waits for its VM's answer before it is rerun
        (``zen.core.silence.decide_silence``): ``stop_timeout_s``, but never before a VM cut off from Zen has ended it
        (its fence, the stop grace and the margin: ``heartbeat_timeout_s`` unless the fence's floor decides)."""
        fence = fence_s(self.heartbeat_timeout_s, self.stop_grace_s, self.agent_heartbeat_s)
        return max(self.stop_timeout_s, fence + self.stop_grace_s + min(MARGIN_S, self.heartbeat_timeout_s / 4))

    @property
    def agent_silence_s(self) -> float:
        return agent_silence_s(self.heartbeat_timeout_s, self.vm_heartbeat_s)


def attempt_deadlines(deadlines: Deadlines, stated_s: float | None) -> Deadlines:
    """``deadlines`` for an attempt whose agent fences from ``stated_s``: a longer ``heartbeat_timeout_s`` than the
    configuration's (lowered since that agent's VM booted) is waited for, the sweep's and a rerun's after a preemption's
    STOP (``preempted_stop_s``) alike, so the attempt is never run again while that agent's fence may still be up;
    a shorter one changes nothing. At most ``MAX_HEARTBEAT_TIMEOUT_S``, as its report is."""
    if stated_s is None or stated_s <= deadlines.heartbeat_timeout_s:
        return deadlines
    return deadlines.model_copy(update={"heartbeat_timeout_s": min(stated_s, MAX_HEARTBEAT_TIMEOUT_S)})
