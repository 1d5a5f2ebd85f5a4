"""A job's container that docker could not remove once the job ended or was stopped (its daemon hung or
failing) may still run the job. Its final report then waits: the attempt goes on reporting RUNNING, as it
may be, while the agent tries the removal again every ``RETRY_S``, so Zen reruns nothing beside it (a
stopped attempt's rerun waits while its VM says it runs: ``zen.core.lifecycle``, ``zen.core.gang``). The
report goes once the container is gone, or after ``WAIT_S`` with a note saying it may still run; the VM
then retires (``zen.agent.agent``: its slot is never another job's) and Zen deletes it, the container with it.
Not while the VM shuts down: it is going, and the container with it.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

WAIT_S = 300.0  # the longest a final report waits for a container that may still run
RETRY_S = 10.0  # between two removals tried (each ``docker rm -f``, bounded by ``zen.agent.removal``)
ROUND_S = 1.0  # the least time one round of heartbeat and orders takes (its orders are ignored: it has ended)
RUNNING_NOTE = "zen: the job's container could not be removed and may still run; the agent tries again"


class Removable(Protocol):
    container_gone: bool | None

    def remove_container(self, budget_s: float = ...) -> None: ...


def hold(job: Removable, note: str | None, beat: Callable[[float], float], clock: Callable[[], float],
         stopping: Callable[[], bool], sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Wait while ``job``'s container may run (``container_gone`` False), ``beat(next_beat)`` sending the
    attempt's RUNNING heartbeat when due (returns the next time one is due) and taking its orders; the final
    report's ``note`` then, with what happened to the container added when there is something to say."""
    if job.container_gone is not False:
        return note
    said = _wait(job, beat, clock, stopping, WAIT_S, sleep)
    return note if said is None else f"{note}\n{said}" if note else said


def _wait(job: Removable, beat: Callable[[float], float], clock: Callable[[], float], stopping: Callable[[], bool],
          wait_s: float, sleep: Callable[[float], None]) -> str | None:
    began = clock()
    next_beat, next_try = began, began + RETRY_S
    while job.container_gone is False and not stopping() and clock() - began < wait_s:
        round_began = clock()
        next_beat = beat(next_beat)
        if clock() >= next_try:
            job.remove_container(RETRY_S)
            next_try = clock() + RETRY_S
        sleep(max(0.0, ROUND_S - (clock() - round_began)))
    if job.container_gone:
        return f"zen: the job's container was removed {clock() - began:.0f} s after the job ended (docker failed before)"
    return (None if stopping() else f"zen: the job's container could not be removed within {wait_s:.0f} s: it may "
            "still run; this VM takes no more jobs and is deleted")
