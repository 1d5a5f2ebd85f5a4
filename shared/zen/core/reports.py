"""What agents and Zen say to each other about an attempt and a VM: an agent's report of an attempt
(``AgentStatus``), a VM's state (``VmState``) and Zen's orders to a VM (``ControlAction``). The messages that
carry them: ``zen.core.models``."""

from __future__ import annotations

import enum


class AgentStatus(str, enum.Enum):
    """What an agent reports about one attempt of a job."""

    CLAIMED = "CLAIMED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    PREEMPTED = "PREEMPTED"


# What an attempt says while its container, which docker could not remove after the agent stopped it, may still run
# (zen.agent.leftover): its VM retires, and a retired VM whose stopping job says this is held for it no more, but
# deleted (zen.store.fleet.held_vms), before Zen reruns the job on another (its silence: zen.core.lifecycle).
LEFT_RUNNING = "zen: the job's container could not be removed and may still run; the agent tries again"


class VmState(str, enum.Enum):
    IDLE = "IDLE"
    BUSY = "BUSY"
    STOPPING = "STOPPING"  # the VM is shutting down (preemption, deletion)
    # A pull limit reached (zen.agent.limits), a fault of the VM's own (docker, its GPUs, its disk, a container left
    # running: DailyPulls.retire), or told it is being scaled down: takes no more jobs, waits to be deleted (says no why)
    RETIRED = "RETIRED"


class ControlAction(str, enum.Enum):
    CONFIRM = "CONFIRM"  # your claim won: run the attempt
    RELEASE = "RELEASE"  # your claim lost (or the job is gone): drop the start message
    STOP = "STOP"  # stop this attempt now


MAX_LEFT_VMS = 100  # the VMs that gave an attempt up, kept per attempt (``Job.left_vms``)


def gave_up(left: dict[str, int] | None, vm: str, seq: int) -> dict[str, int]:
    """``Job.left_vms`` with ``vm`` gone from the attempt since its report ``seq`` (its earlier reports are late
    copies): the latest ``MAX_LEFT_VMS`` kept, so a row stays bounded whatever VMs report (one dropped only
    loses the guard against its late copies)."""
    seq = max(seq, (left or {}).get(vm, seq))  # a copy delivered late lowers no floor
    return dict(sorted({**(left or {}), vm: seq}.items(), key=lambda item: item[1])[-MAX_LEFT_VMS:])


EPOCH_MS = 10 ** 12  # a seq from here up is epoch milliseconds (2001 on); an agent counting from 1 per claim sends less


def refused_floor(left: dict[str, int] | None, vm: str, seq: int) -> dict[str, dict[str, int]]:
    """The fields that make ``vm``'s claim ``seq``, lost to another VM's or refused, a floor for its later
    copies (``gave_up``): it drops its copy of the start, so the same claim delivered again once the attempt is
    requeued is a late one. Nothing for a seq that is no epoch milliseconds: an older agent counting from 1 per
    claim claims again below it."""
    return {"left_vms": gave_up(left, vm, seq)} if seq >= EPOCH_MS else {}
