"""How ``ClusterManager`` sees one MIG instance (a ``Vm``, from the listing and Zen's records), and
which VMs on their way out it must delete itself, whatever the policy planned (``leftovers``).

Pure functions over plain data; the manager caches their results per VM while the inputs are the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterable, Mapping

from zen.scaling.model import Vm, VmPhase
from zen.scaling.port import MigInstance


def classify(instance: MigInstance, region: str, first_seen: datetime, held: Mapping, agents: Mapping,
             drained: bool = False) -> Vm:
    """The planner's view of one instance. DELETING: going away, not supply, counted against the limits
    until gone. A *drained* instance (a scale-down marked it and refuses its claims) is DELETING even
    while the MIG still lists it as running: its delete may have failed (or the pass died between the
    drain and the delete), and as idle supply a queued job would wait on it forever, every claim refused.
    A RETIRED agent takes no more jobs (a pull limit, ``zen.agent.limits``): not supply, deleted next."""
    agent = agents.get(instance.name)
    if instance.deleting or drained or (agent and agent["state"] in ("STOPPING", "RETIRED")):
        phase, since = VmPhase.DELETING, first_seen
    elif instance.name in held:
        phase, since = VmPhase.BUSY, first_seen
    elif not instance.running or agent is None:
        phase, since = VmPhase.BOOTING, first_seen  # no VM yet, or its agent has not spoken yet
    elif agent["state"] == "IDLE":
        phase, since = VmPhase.IDLE, agent["idle_since"] or agent["last_seen_at"]
    else:
        phase, since = VmPhase.BUSY, agent["last_seen_at"]  # the agent says busy (e.g. claiming)
    return Vm(instance.name, region, phase, since, zone=instance.zone, job_id=held.get(instance.name),
              creation_error=instance.creation_error if phase is VmPhase.BOOTING else None)


def leftovers(deleting: Iterable[Vm], view_of: Callable[[Vm], tuple | None], planned: set[str]
              ) -> list[tuple[Vm, bool]]:
    """The DELETING VMs that nobody else deletes, each with whether its agent is RETIRED (else it is
    drained): they hold no job, the plan does not delete them, and their MIG is not deleting them.
    A RETIRED agent only waits to be deleted; a drained VM whose delete failed is deleted again every
    pass until it leaves its MIG (the drain stays: a delete that timed out may still go through).
    ``view_of``: a VM's (instance, first seen, job, agent, Vm, drained) as the manager read it."""
    out = []
    for vm in deleting:
        view = view_of(vm)
        if vm.job_id is not None or vm.name in planned or view is None or view[0].deleting:
            continue
        retired = view[3] is not None and view[3]["state"] == "RETIRED"
        if retired or view[5]:
            out.append((vm, retired))
    return out
