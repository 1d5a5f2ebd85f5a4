"""The simulated cloud behind the stand-in: regional MIGs, their instances, GPU capacity, boots,
stockouts, quota errors, preemptions and deletions, driven by an injectable cloud clock.

Event driven: :meth:`World.advance` runs every event due up to the clock's ``now`` (the server calls
it before every request, a ticker thread a few times a second); with a
:class:`~zen_dev.local.compute.clock.ManualClock` nothing happens until a test moves the clock.
The life of an instance: docs/reference/simulator.md#what-the-compute-stand-in-simulates
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import uuid
from typing import Any, Callable

from zen_dev.capacity.traces import CapacitySchedule
from zen_dev.local.compute import resources as r
from zen_dev.local.compute.build import MigDef
from zen.core.quotas import ALL_REGIONS, gpu_metric
from zen_dev.local.compute.faults import BootDelay, QuotaRules
from zen_dev.local.compute.model import (
    BOOTING, DELETE_ORDER, DELETING, QUOTA, RUNNING, STOCKOUT, STOPPING, WAITING, Instance, Mig, Operation,
)
from zen_dev.capacity.scenario import Scenario
from zen_dev.local.compute.processes import VmProcesses
from zen_dev.local.compute.resize_requests import ResizeRequests

log = logging.getLogger("zen_dev.local.compute")


class World:
    """All mutable state. Callers hold ``lock`` and call :meth:`advance` before reading or
    changing anything, so the world has caught up with the clock (the API layer does this)."""

    def __init__(
        self,
        *,
        project: str,
        migs: list[MigDef],
        capacity: CapacitySchedule,
        scenario: Scenario,
        clock: Any,
        processes: VmProcesses | None = None,
        timestamps: r.Timestamps | None = None,
        names_salt: str = "",
    ):
        self.project, self.capacity, self.scenario, self.clock = project, capacity, scenario, clock
        self.processes = processes
        self.ts = timestamps or r.Timestamps(scenario.start_time)
        self.lock = threading.RLock()
        self.proof_host: str | None = None  # HOST:PORT/zen-local/vms: each VM's identity token (issuer.py)
        self.preempt_notice_s = 30.0  # real seconds from a preemption's notice (and SIGTERM) to SIGKILL (notice.py)
        self.now = clock.now()
        seed = scenario.seed
        # VM names: the scenario's seed, and a salt a stand-in started anew draws (__main__), so a restarted
        # stack's VMs are not named as the last one's were (a job's history named two VMs alike).
        self._names_rng = random.Random(f"{seed}/names{names_salt}")
        self._preempt_rng = random.Random(f"{seed}/preemptions")
        self._boot = BootDelay(scenario.timings.boot, random.Random(f"{seed}/boot"))
        self._quota = QuotaRules(list(scenario.faults.quota))
        self._timings = scenario.timings
        self._preemption = scenario.faults.preemptions
        self._events: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = itertools.count(1)
        self._ids = itertools.count(7_000_000_000_000_000_001)
        self._usage: dict[tuple[str, str], int] = {}
        self._operations: dict[tuple[str, str], Operation] = {}
        self._requests: dict[str, Operation] = {}
        self.migs: dict[tuple[str, str], Mig] = {}
        self.resize_requests = ResizeRequests(self)  # flex-start MIGs grow by these
        for spec in migs:
            mig = Mig(spec, project, next(self._ids), self.now, scenario.api.max_errors_per_mig)
            self.migs[(spec.region, spec.name)] = mig
            if spec.target_size:
                self._set_size(mig, spec.target_size)
        for event in self._preemption.at:
            self._schedule(event.at_s, self._scripted_preemption, event)
        if self._preemption.when_capacity_drops:
            for key in sorted({(z, m.machine_type) for m in migs for z in m.zones}):
                self._watch_capacity(key)

    # ----- the event loop ------------------------------------------------------------------
    def _schedule(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._events, (max(t, self.now), next(self._seq), fn, args))

    def advance(self, to: float | None = None) -> float:
        """Run every event due up to ``to`` (default: the clock's now)."""
        with self.lock:
            to = self.clock.now() if to is None else to
            while self._events and self._events[0][0] <= to:
                t, _, fn, args = heapq.heappop(self._events)
                self.now = max(self.now, t)
                fn(*args)
            self.now = max(self.now, to)
            return self.now

    def next_event_time(self) -> float | None:
        with self.lock:
            return self._events[0][0] if self._events else None

    # ----- capacity and placement ----------------------------------------------------------
    def used(self, zone: str, machine_type: str) -> int:
        return self._usage.get((zone, machine_type), 0)

    def free(self, zone: str, machine_type: str) -> int:
        return self.capacity.capacity(zone, machine_type, self.now) - self.used(zone, machine_type)

    def _hold(self, inst: Instance, zone: str) -> None:
        key = (zone, inst.mig.spec.machine_type)
        self._usage[key] = self._usage.get(key, 0) + 1
        inst.zone, inst.holds = zone, True

    def _release(self, inst: Instance) -> None:
        if inst.holds:
            key = (inst.zone, inst.mig.spec.machine_type)
            self._usage[key] -= 1
            inst.holds = False

    def _region_usage(self, region: str, machine_type: str | None) -> int:
        """VMs holding capacity in ``region`` (of ``machine_type``, or of any type when None)."""
        return sum(
            n for (zone, mt), n in self._usage.items()
            if zone.startswith(region + "-") and (machine_type is None or mt == machine_type)
        )

    # -- GPU quotas (counted in GPUs of the VMs holding capacity: zen.core.quotas) ------------------
    @staticmethod
    def _gpu_metric(mig: Mig) -> str | None:
        return gpu_metric(mig.spec.gpu_type, mig.spec.model or "spot") if mig.spec.gpu_type else None

    def _gpus_in_use(self, region: str | None, metric: str | None) -> int:
        return sum(mig.spec.gpu_count for mig in self.migs.values() if mig.spec.gpu_type
                   and (region is None or mig.spec.region == region)
                   and (metric is None or self._gpu_metric(mig) == metric)
                   for inst in mig.instances.values() if inst.holds)

    def region_quotas(self, region: str) -> list[dict[str, Any]]:
        """The region's GPU quotas as regions.get reports them: those of its MIGs' GPU families, for standard
        and for preemptible VMs (Compute reports both whichever VMs run), and those the scenario lists for it."""
        spec = self.scenario.gpu_quotas
        listed = spec.regions.get(region, {})
        metrics = sorted({gpu_metric(mig.spec.gpu_type, model) for mig in self.migs.values()
                          if mig.spec.region == region and mig.spec.gpu_type for model in ("standard", "spot")}
                         | set(listed))
        return [{"metric": m, "limit": float(listed.get(m, spec.default)), "usage": float(self._gpus_in_use(region, m))}
                for m in metrics]

    def project_quotas(self) -> list[dict[str, Any]]:
        return [{"metric": ALL_REGIONS, "limit": float(self.scenario.gpu_quotas.all_regions),
                 "usage": float(self._gpus_in_use(None, None))}]

    def _gpu_quota_refusal(self, mig: Mig) -> str | None:
        """Compute's QUOTA_EXCEEDED message when one more VM of ``mig`` does not fit a GPU quota."""
        metric = self._gpu_metric(mig)
        if metric is None:
            return None
        region = mig.spec.region
        for quota, where in ((next(q for q in self.region_quotas(region) if q["metric"] == metric), f"region {region}"),
                             (self.project_quotas()[0], "all regions")):
            if quota["usage"] + mig.spec.gpu_count > quota["limit"]:
                return f"Quota '{quota['metric']}' exceeded.  Limit: {quota['limit']} in {where}."
        return None

    def _zone_load(self, mig: Mig, zone: str, exclude: Instance | None = None) -> int:
        return sum(1 for i in mig.live() if i.zone == zone and i is not exclude)

    def _zones_for(self, mig: Mig, inst: Instance) -> tuple[str, ...]:
        """Where a new VM of ``mig`` may go: any of its zones, or for a single-zone MIG (a compact cluster's) the
        zone its other VMs hold, while they hold one."""
        if mig.spec.single_zone:
            held = sorted({i.zone for i in mig.live() if i is not inst and i.holds})
            if held:
                return (held[0],)
        return tuple(mig.spec.zones)

    def _new_instance(self, mig: Mig, zone: str | None = None, after_s: float = 0.0) -> Instance:
        """A new instance of ``mig``, tried at once (or ``after_s`` from now): in ``zone`` when given (a resize
        request's grant), else in its least loaded zone, or another with room."""
        while True:
            suffix = "".join(self._names_rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(4))
            name = f"{mig.name}-{suffix}"
            if name not in mig.instances:
                break
        zones = mig.spec.zones
        zone = zone or min(zones, key=lambda z: (self._zone_load(mig, z), zones.index(z)))
        inst = Instance(name, mig, zone, next(self._seq), self.now)
        mig.instances[name] = inst
        log.info("%s: creating %s", mig.name, name)
        if after_s > 0:
            self._schedule(self.now + after_s, self._attempt, inst, inst.gen)
        else:
            self._attempt(inst, inst.gen)
        return inst

    def _attempt(self, inst: Instance, gen: int) -> None:
        if inst.gen != gen or inst.removed or inst.phase != WAITING:
            return
        mig = inst.mig
        mt, region = mig.spec.machine_type, mig.spec.region
        rule = self._quota.blocking_rule(region, mt, self.now, self._region_usage)
        if rule is not None:
            self._fail(inst, QUOTA, QuotaRules.message(rule))
            return
        refused = self._gpu_quota_refusal(mig)
        if refused is not None:
            self._fail(inst, QUOTA, refused)
            return
        zones = self._zones_for(mig, inst)
        fits = [z for z in zones if self.free(z, mt) > 0]
        if not fits:
            message = (
                f"The zone 'projects/{self.project}/zones/{inst.zone if inst.zone in zones else zones[0]}' does "
                "not have enough resources available to fulfill the request.  Try a different zone, or try again later."
            )
            self._fail(inst, STOCKOUT, message)
            return
        if mig.spec.single_zone:
            zone = max(fits, key=lambda z: (self.free(z, mt), -zones.index(z)))
        else:
            zone = inst.zone if inst.zone in fits else min(
                fits, key=lambda z: (self._zone_load(mig, z, inst), zones.index(z)))
        self._hold(inst, zone)
        delay = max(0.0, self._boot.draw())
        inst.phase, inst.errors, inst.vm_id = BOOTING, [], next(self._ids)
        inst.boot_start, inst.boot_end = self.now, self.now + delay
        log.info("%s: %s placed in %s, booting for %.0f s", mig.name, inst.name, zone, delay)
        self._schedule(inst.boot_end, self._boot_done, inst, inst.gen)

    def _fail(self, inst: Instance, code: str, message: str) -> None:
        repeated = bool(inst.errors) and inst.errors[0][0] == code
        inst.errors = [(code, message)]
        mig = inst.mig
        mig.errors.append({
            "instanceActionDetails": {
                "action": inst.action,
                "instance": r.instance_url(self.project, inst.zone, inst.name),
                "version": {"instanceTemplate": r.template_url(self.project, mig.name)},
            },
            "error": {"code": code, "message": message},
            "timestamp": self.ts.at(self.now),
        })
        level = logging.DEBUG if repeated else logging.INFO
        log.log(level, "%s: %s failed: %s (retrying every %g s)", mig.name, inst.name, code, self._timings.retry_interval_s)
        self._schedule(self.now + self._timings.retry_interval_s, self._attempt, inst, inst.gen)

    def _boot_done(self, inst: Instance, gen: int) -> None:
        if inst.gen != gen or inst.removed or inst.phase != BOOTING:
            return
        inst.phase, inst.action, inst.recreating = RUNNING, "NONE", False
        log.info("%s: %s is RUNNING in %s", inst.mig.name, inst.name, inst.zone)
        if self.processes is not None:
            self.processes.start(inst.name, self.vm_env(inst), note=f"at cloud t={self.now:.0f}s ")
        rate = self._preemption.rate_per_hour
        if rate > 0:
            self._schedule(self.now + self._preempt_rng.expovariate(rate / 3600.0), self._rate_preemption, inst, inst.gen)

    def vm_env(self, inst: Instance) -> dict[str, str]:
        return {
            "ZEN_VM_NAME": inst.name, "ZEN_CLUSTER": inst.mig.spec.cluster or "",
            "ZEN_REGION": inst.mig.spec.region, "ZEN_ZONE": inst.zone,
            "ZEN_PROJECT": self.project, "ZEN_MIG": inst.mig.name,
            "ZEN_VM_IP": "127.0.0.1",  # every stand-in VM is this machine: a gang's nodes meet on loopback
            **({"ZEN_VM_PROOF_METADATA_HOST": f"{self.proof_host}/{inst.name}",
                "ZEN_PREEMPTION_METADATA_HOST": f"{self.proof_host}/{inst.name}"} if self.proof_host else {}),
        }

    def running(self, name: str) -> Instance | None:
        """The running VM of that name, if any."""
        found = [m.instances.get(name) for m in self.migs.values()]
        return next((i for i in found if i is not None and not i.removed and i.phase == RUNNING), None)

    # ----- deletion and preemption ---------------------------------------------------------
    def _stop_vm(self, inst: Instance) -> None:
        if self.processes is not None:
            self.processes.stop(inst.name)

    def _delete(self, inst: Instance) -> None:
        inst.doomed = True
        inst.gen += 1
        self._stop_vm(inst)
        if not inst.holds:
            self._remove(inst)
            return
        inst.phase, inst.action = DELETING, "DELETING"
        self._schedule(self.now + self._timings.delete_s, self._remove_event, inst, inst.gen)

    def _remove_event(self, inst: Instance, gen: int) -> None:
        if inst.gen == gen and not inst.removed:
            self._remove(inst)

    def _remove(self, inst: Instance) -> None:
        self._release(inst)
        inst.removed = True
        inst.mig.instances.pop(inst.name, None)
        log.info("%s: %s deleted", inst.mig.name, inst.name)

    def preempt(self, inst: Instance, why: str = "preempted") -> bool:
        """Preempt a VM that exists (booting or running); False when there is none."""
        if inst.removed or inst.doomed or inst.phase not in (BOOTING, RUNNING) or not inst.mig.preemptible:
            return False
        inst.gen += 1
        inst.preempted = True  # its metadata's instance/preempted turns TRUE (notice.py), as GCE's ACPI soft off comes
        if self.processes is not None:
            self.processes.stop(inst.name, grace_s=self.preempt_notice_s)
        inst.phase = STOPPING
        log.info("%s: %s %s", inst.mig.name, inst.name, why)
        if self._preemption.recreate:
            inst.action = "RECREATING"
            self._schedule(self.now + self._timings.preempt_stop_s, self._recreate, inst, inst.gen)
        else:
            inst.doomed, inst.action = True, "DELETING"
            inst.mig.target_size -= 1
            self._schedule(self.now + self._timings.preempt_stop_s, self._remove_event, inst, inst.gen)
        return True

    def _recreate(self, inst: Instance, gen: int) -> None:
        if inst.gen != gen or inst.removed:
            return
        self._release(inst)
        inst.phase, inst.action, inst.recreating, inst.vm_id = WAITING, "RECREATING", True, None
        inst.preempted = False
        self._attempt(inst, inst.gen)

    def _scripted_preemption(self, event: Any) -> None:
        candidates = sorted(
            (i for m in self.migs.values() for i in m.instances.values()
             if i.phase == RUNNING and not i.doomed
             and (event.mig is None or m.name == event.mig)
             and (event.zone is None or i.zone == event.zone)
             and (event.instance is None or i.name == event.instance)),
            key=lambda i: (i.mig.name, i.name),
        )
        chosen = self._preempt_rng.sample(candidates, min(event.count, len(candidates)))
        if not chosen:
            log.info("scripted preemption at %.0f s found no running VM to preempt", self.now)
        for inst in chosen:
            self.preempt(inst, "preempted (scripted)")

    def _rate_preemption(self, inst: Instance, gen: int) -> None:
        if inst.gen == gen:
            self.preempt(inst, "preempted (random)")

    def _watch_capacity(self, key: tuple[str, str]) -> None:
        t = self.capacity.next_change(key[0], key[1], self.now)
        if t is not None:
            self._schedule(t, self._capacity_changed, key)

    def _capacity_changed(self, key: tuple[str, str]) -> None:
        zone, mt = key
        excess = -self.free(zone, mt)
        if excess > 0:
            victims = sorted(
                (i for m in self.migs.values() if m.spec.machine_type == mt for i in m.instances.values()
                 if i.zone == zone and i.phase in (BOOTING, RUNNING) and not i.doomed and m.preemptible),
                key=lambda i: (i.phase == RUNNING, -i.seq),
            )
            for inst in victims[:excess]:
                self.preempt(inst, f"preempted (capacity of {zone} fell)")
        self._watch_capacity(key)

    # ----- MIG operations (called by the API layer with the lock held) -------------------
    def _set_size(self, mig: Mig, size: int) -> None:
        live = mig.live()
        mig.target_size = size
        for _ in range(size - len(live)):
            self._new_instance(mig)
        if len(live) > size:
            victims = sorted(live, key=lambda i: (DELETE_ORDER[i.phase], -i.seq))[: len(live) - size]
            for inst in victims:
                self._delete(inst)

    def find_mig(self, project: str, region: str, name: str) -> Mig:
        self.check_project(project)
        mig = self.migs.get((region, name))
        if mig is None:
            raise r.not_found(r.mig_path(project, region, name))
        return mig

    def find_template(self, project: str, name: str) -> Mig:
        """The MIG whose instance template is ``name`` (``<MIG>-template``)."""
        self.check_project(project)
        mig = next((m for m in self.migs.values() if f"{m.name}-template" == name), None)
        if mig is None:
            raise r.not_found(f"projects/{project}/global/instanceTemplates/{name}")
        return mig

    def check_project(self, project: str) -> None:
        if project != self.project:
            raise r.not_found(r.project_path(project))

    def resize(self, mig: Mig, size: int, request_id: str | None = None) -> Operation:
        if request_id and request_id in self._requests:
            return self._requests[request_id]
        if size < 0:
            raise r.invalid(f"Invalid value for field 'size': '{size}'. Must be greater than or equal to 0.")
        if size > r.MAX_MIG_SIZE:
            raise r.invalid(f"Invalid value for field 'size': '{size}'. Must be less than or equal to {r.MAX_MIG_SIZE}.")
        op = self._operation(mig, "compute.instanceGroupManagers.resize", request_id)
        self._land(op, self._set_size, mig, size)
        return op

    def delete_instances(self, mig: Mig, refs: list[str], skip_invalid: bool, request_id: str | None = None) -> Operation:
        if request_id and request_id in self._requests:
            return self._requests[request_id]
        chosen: dict[str, Instance] = {}
        for ref in refs:
            zone, name = r.parse_instance_ref(str(ref))
            if zone is None:  # Compute: "always fails if the request contains a malformed instance URL"
                raise r.invalid(f"Invalid value for field 'instances': '{ref}'. Expected a URL or a partial "
                                "URL such as zones/ZONE/instances/NAME.")
            inst = mig.instances.get(name)
            if inst is None or inst.removed or inst.zone != zone:
                if skip_invalid:
                    continue
                raise r.invalid(
                    f"The resource '{ref}' is not a member of the managed instance group "
                    f"'{r.mig_path(self.project, mig.spec.region, mig.name)}'."
                )
            chosen[name] = inst
        op = self._operation(mig, "compute.instanceGroupManagers.deleteInstances", request_id)
        self._land(op, self._delete_chosen, mig, list(chosen.values()))
        return op

    def _delete_chosen(self, mig: Mig, chosen: list[Instance]) -> None:
        for inst in chosen:
            if not inst.doomed and not inst.removed:
                mig.target_size -= 1
                self._delete(inst)

    def _land(self, op: Operation, change: Callable[..., None], *args: Any) -> None:
        """Carry out a write's ``change`` now, or (``api.writes_land_when_done``) when its operation is DONE: Compute
        marks a resize DONE "when the resize actions are scheduled", so until then the MIG's target size and
        instances do not show it. Writes to one MIG land in the order they were made."""
        if self.scenario.api.writes_land_when_done and op.done_t > self.now:
            self._schedule(op.done_t, change, *args)
        else:
            change(*args)

    def _operation(self, mig: Mig, op_type: str, request_id: str | None) -> Operation:
        epoch_ms = int(self.ts.start.timestamp() * 1000 + self.now * 1000)
        name = f"operation-{epoch_ms}-{uuid.uuid4().hex[:13]}-{uuid.uuid4().hex[:8]}"
        op = Operation(
            name=name, id=next(self._ids), op_type=op_type, project=self.project, region=mig.spec.region,
            target_link=r.mig_url(self.project, mig.spec.region, mig.name), target_id=mig.id,
            insert_t=self.now, done_t=self.now + self.scenario.api.operation_delay_s,
        )
        self._operations[(mig.spec.region, name)] = op
        if request_id:
            self._requests[request_id] = op
        return op

    def find_operation(self, project: str, region: str, name: str) -> Operation:
        self.check_project(project)
        op = self._operations.get((region, name))
        if op is None:
            raise r.not_found(f"projects/{project}/regions/{region}/operations/{name}")
        return op

    def operations_in(self, region: str) -> list[Operation]:
        return [op for (reg, _), op in self._operations.items() if reg == region]
