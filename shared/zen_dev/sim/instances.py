"""Instances, zone capacity and billing in the simulated world (see ``zen_dev.sim.world``).

``InstanceWorld`` is the half of ``zen_dev.sim.world.Simulation`` that owns instance creation, placement
in a zone with free capacity, the MIG's retries while capacity is missing (and the errors they
leave), spot preemptions when a zone's capacity falls, deletion and what each VM is billed. It is a
mixin: the attributes it uses (``now``, ``heap``, ``capacity``, ``used``, ``result``, ...) are set by
``Simulation.__init__``, and it calls back ``Simulation._booted`` and ``_preempt``.
"""

from __future__ import annotations

import heapq
import math
import random

from zen.core.prices import BILLING_MINIMUM_S, billed_seconds  # GCE's billing, shared with zen usage
from zen.scaling.model import ErrorKind, VmPhase
from zen_dev.sim.jobs import sample
from zen_dev.sim.state import SimMig as _Mig, SimVm as _Vm

# Order of events at the same instant: runs ending first (one that ends as its zone's capacity drops is done,
# not preempted: its work was counted as rework and run again), then capacity, VM changes, submissions, and
# ticks last so a tick sees everything that happened at its instant.
_FINISH, _DROP, _RETRY, _GONE, _BOOTED, _PREEMPT, _SUBMIT, _TICK = range(8)
_EPS = 1e-9


def kept_s(job, ran_s: float) -> float:
    """Of ``ran_s`` seconds a job ran before a preemption, what its checkpoints keep: up to its last
    checkpoint (every ``checkpoint_every_s`` since the attempt started; none without). Restoring is not
    timed: the rerun's boot and staging stand for it."""
    every = job.spec.checkpoint_every_s
    return 0.0 if not every else min(job.left_s, math.floor(ran_s / every + _EPS) * every)


class InstanceWorld:
    """Instances, capacity and billing; mixed into ``Simulation``."""

    GRANT = _RETRY  # a flex-start request's grant (zen_dev.sim.flexstart) orders as a MIG's retry

    def _push(self, t: float, prio: int, fn, *args) -> None:
        heapq.heappush(self.heap, (t, prio, next(self.seq), fn, args))

    def _create(self, mig: _Mig, count: int = 1) -> None:
        """``count`` new instances (one resize), each placed in a zone with free capacity or left
        waiting for it, as ``_attempt`` does one by one. Once no zone has room, none has for the rest
        at this instant (placing only uses capacity up): they wait together, failed at the same
        moment (one failure tuple shared, one retry scheduled)."""
        if mig.model == "flex-start":
            self.flex.request(mig, count)  # a resize request, granted whole later
            return
        now, vms, everywhere = self.now, mig.vms, mig.cluster.vms
        for left in range(count, 0, -1):
            vm = _Vm(f"{mig.name}-{next(self.names):06d}", mig, now)
            vms[vm.name] = everywhere[vm.name] = vm
            zone = self._free_zone(mig)
            if zone is None:
                break
            self._place(mig, vm, zone)
        else:
            return
        failed, errors, waiting = (now,), mig.errors, mig.waiting
        if not waiting:
            mig.anchor = now
        while True:  # ``vm`` first, then the rest (``_Vm`` marks each new one as changed)
            vm.wait_since, vm.error = now, ErrorKind.STOCKOUT
            errors[vm.name] = failed
            waiting[vm.name] = vm
            left -= 1
            if not left:
                break
            vm = _Vm(f"{mig.name}-{next(self.names):06d}", mig, now)
            vms[vm.name] = everywhere[vm.name] = vm
        self._schedule_retry(mig)

    def _attempt(self, mig: _Mig, vm: _Vm) -> None:
        zone = self._free_zone(mig)
        if zone is not None:
            self._place(mig, vm, zone)
            return
        vm.wait_since, vm.error = self.now, ErrorKind.STOCKOUT
        vm.touch()
        mig.errors[vm.name] = mig.errors.get(vm.name, ()) + (self.now,)
        if not mig.waiting:
            mig.anchor = self.now
        mig.waiting[vm.name] = vm
        self._schedule_retry(mig)

    def _free_zone(self, mig: _Mig) -> str | None:
        if self.unlimited and mig.sold:  # (a pool not sold has no capacity, whatever a world ignores)
            mig.round_robin += 1
            return mig.zones[mig.round_robin % len(mig.zones)]
        best, best_free = None, 0
        for zone in mig.zones:
            key = mig.capacity_key(zone)
            free = self._capacity_now(key) - self.used.get(key, 0)
            if free > best_free:
                best, best_free = zone, free
        return best

    def _capacity_now(self, key: tuple[str, str]) -> int:
        """The zone's capacity at this instant, looked up once per instant (the schedule is fixed, and
        one resize places many instances at the same instant)."""
        at, known = self._capacity_at
        if at != self.now:
            known = {}
            self._capacity_at = (self.now, known)
        capacity = known.get(key)
        if capacity is None:
            capacity = known[key] = self.capacity.capacity(key[0], key[1], self.now)
        return capacity

    def _place(self, mig: _Mig, vm: _Vm, zone: str) -> None:
        key = mig.capacity_key(zone)
        self.used[key] = self.used.get(key, 0) + 1
        if self.preempt_on_drop and key not in self.watched:
            self._watch(key)
        if vm.wait_since is not None:
            # Its failures not yet collected, up to now (exclusive), still show in listErrors later.
            self._retry_errors(mig, mig.errors_until, self.now - _EPS, mig.errors, only=vm)
            del mig.waiting[vm.name]
        vm.zone, vm.created_s, vm.error, vm.wait_since = zone, self.now, None, None
        vm.touch()
        self.result.vms_created += 1
        self._billed(+1)
        provisioning, guest = self._boot(mig)
        vm.running_s = self.now + provisioning  # RUNNING in its MIG's listing, and billed, from here
        vm.epoch += 1
        self._push(vm.running_s, _BOOTED, self._running, vm, vm.epoch)
        word = min(self.scenario.spec.first_word_s, guest)  # the guest's first word: never after its agent's
        self._push(vm.running_s + word, _BOOTED, self._first_word, vm, vm.epoch)
        self._push(vm.running_s + guest, _BOOTED, self._booted, vm, vm.epoch)
        rate = self.scenario.spec.preemption.rate_per_hour
        if rate > 0 and mig.preemptible:
            life = self.preempt_rng.expovariate(rate / 3600.0)
            if self.now + life <= self.horizon:
                self._push(self.now + life, _PREEMPT, self._preempt, vm, self.now)

    def _boot(self, mig: _Mig) -> tuple[float, float]:
        """(provisioning, guest boot) of the next VM of ``mig``: until RUNNING (unbilled), then until its
        agent is up. With the scenario's ``guest_boot``, two draws (its ``boot`` is the provisioning);
        without, one ``boot`` draw split by ``unbilled_boot_fraction``."""
        spec = self.scenario.spec
        total = self._draw_boot(mig)
        if spec.guest_boot is None:
            return spec.unbilled_boot_fraction * total, (1 - spec.unbilled_boot_fraction) * total
        return total, sample(spec.guest_boot, self._stream(f"guest-{mig.name}"))

    def _stream(self, key: str) -> random.Random:
        streams = self._boot_streams
        if key not in streams:
            streams[key] = random.Random(f"boot-{self.boot_seed}-{key}")
        return streams[key]

    def _draw_boot(self, mig: _Mig) -> float:
        """The next boot of ``mig``'s VMs. Each MIG draws from a stream of its own, so every policy's
        n-th VM in a region boots as long (common random numbers): policies differ by what they ask, not
        by which draws they happen to get (with one stream, each policy's order of asks dealt the draws
        differently, and the zen / ask-every-region ratios moved by ~0.1 with the seed alone)."""
        stream = self._stream(mig.name)
        if self.unlimited:  # the reference: the fastest of one draw per region
            return min(sample(self.scenario.spec.boot, stream) for _ in range(len(mig.cluster.migs)))
        return sample(self.scenario.spec.boot, stream)

    def _retry_errors(self, mig: _Mig, after: float, until: float, out: dict, only: _Vm | None = None) -> None:
        """One STOCKOUT failure per waiting instance per retry in ``(after, until]``: their times, added
        to the tuple ``out[instance]`` (``zen_dev.sim.ports`` reports them as ``MigError``s when they are
        visible). Instances waiting since the same moment (or since ``after`` or before) failed at the
        same retries: they share one tuple (immutable, so no instance's later failures reach another's)."""
        step, anchor = self.scenario.spec.retry_interval_s, mig.anchor
        last = math.floor((until - anchor) / step + _EPS)
        shared: dict[float, tuple[float, ...]] = {}  # from when -> the retries after it
        for vm in (only,) if only else mig.waiting.values():
            low = max(after, vm.wait_since)
            times = shared.get(low)
            if times is None:
                first = math.floor((low - anchor) / step + _EPS) + 1
                times = shared[low] = tuple([anchor + k * step for k in range(first, last + 1)])
            if times:
                known = out.get(vm.name)
                out[vm.name] = times if known is None else known + times

    def _next_grid(self, mig: _Mig, t: float) -> float:
        step = self.scenario.spec.retry_interval_s
        return mig.anchor + math.ceil((t - mig.anchor) / step - _EPS) * step

    def _schedule_retry(self, mig: _Mig) -> None:
        """After a failed attempt: retry when some zone's capacity next changes (frees also trigger)."""
        known = mig.next_capacity_change
        if known is None or known[0] != self.now:  # the schedule is fixed: one look per MIG and instant
            changes = [t for zone in mig.zones
                       if (t := self.capacity.next_change(*mig.capacity_key(zone), self.now)) is not None]
            known = mig.next_capacity_change = (self.now, min(changes) if changes else None)
        if known[1] is not None:
            self._retry_at(mig, self._next_grid(mig, known[1]))

    def _retry_at(self, mig: _Mig, t: float) -> None:
        if mig.retry_at is not None and self.now <= mig.retry_at <= t:
            return
        mig.retry_at = t
        self._push(t, _RETRY, self._retry, mig, t)

    def _retry(self, mig: _Mig, t: float) -> None:
        if mig.retry_at != t:
            return  # superseded by an earlier retry
        mig.retry_at = None
        for vm in list(mig.waiting.values()):
            zone = self._free_zone(mig)
            if zone is None:
                break
            self._place(mig, vm, zone)
        if mig.waiting:
            self._schedule_retry(mig)

    def _watch(self, key: tuple[str, str]) -> None:
        """Check the zone again when its capacity next changes (only while VMs hold capacity there)."""
        t = self.capacity.next_change(key[0], key[1], self.now)
        if t is not None and t <= self.horizon:
            self.watched.add(key)
            self._push(t, _DROP, self._capacity_dropped, key)

    def _capacity_dropped(self, key: tuple[str, str]) -> None:
        """Spot semantics: when a zone's capacity falls below what runs there, GCE takes VMs back.

        The victims are drawn at random (seeded): GCE does not say which spot VMs it takes back. The
        simulator used to take the newest first, which quietly favoured single-use policies: their
        newest VM always holds the most recently started job (the least work lost), while a reused
        VM's newest instance may hold a job that has run for days. On gcp-a100-30d that rule alone
        turned zen's never-started count from ask-every-region's (965 / 965) into 970 / 823. Each
        victim is recreated by its MIG and waits for capacity like any other instance, and its job
        (if any) is queued again."""
        self.watched.discard(key)
        zone, machine_type = key
        held = [vm for mig in self.by_zone.get(key, ()) for vm in mig.vms.values()
                if vm.zone == zone and vm.created_s is not None]
        # A VM being deleted gives its capacity back within seconds: GCE takes running VMs only for the rest.
        excess = (self.used.get(key, 0) - self.capacity.capacity(zone, machine_type, self.now)
                  - sum(1 for vm in held if vm.phase is VmPhase.DELETING))
        if excess > 0:
            victims = sorted((vm for vm in held if vm.phase is not VmPhase.DELETING and vm.mig.preemptible),
                             key=lambda vm: vm.name)
            victims = self.victim_rng.sample(victims, excess) if excess < len(victims) else victims
            for vm in victims:
                self.result.capacity_preemptions += 1
                self._preempt(vm, vm.created_s)
        if self.used.get(key, 0) > 0 and key not in self.watched:
            self._watch(key)

    def _capacity_freed(self, zone: str, machine_type: str) -> None:
        for mig in self.by_zone.get((zone, machine_type), ()):
            if mig.waiting:
                self._retry_at(mig, self._next_grid(mig, self.now))
            if mig.model == "flex-start":
                self.flex.capacity_freed(mig)

    def _watch_for_room(self, mig: _Mig) -> None:
        """A flex-start request waits for room: look again when a zone's capacity next changes (a VM
        going also frees room: ``_capacity_freed``)."""
        changes = [t for zone in mig.zones if (t := self.capacity.next_change(*mig.capacity_key(zone), self.now)) is not None]
        if changes and min(changes) <= self.horizon:
            self._push(min(changes), _RETRY, self.flex.capacity_freed, mig)

    def _billed(self, delta: int) -> None:
        result = self.result
        result.billed_now += delta
        result.peak_vms = max(result.peak_vms, result.billed_now)
        series = result.vm_series
        if series and series[-1][0] == self.now:
            series[-1] = (self.now, result.billed_now)
        else:
            series.append((self.now, result.billed_now))

    def _account(self, vm: _Vm, end: float, preempted: bool = False, stop_s: float = 0.0) -> None:
        """Add one VM incarnation's paid and wasted seconds: paid from RUNNING (``running_s``, the
        scenario's ``unbilled_boot_fraction`` into its boot) until it is gone, nothing if it was deleted
        before RUNNING. Waste: all of it if it never ran a job, else the time it sat idle or was being
        deleted (its billed boot served a job). A job cut short by a preemption runs again from the
        start, or from its last checkpoint: the paid run since is counted apart, as lost (``lost_seconds``), not as waste.

        Dollars as GCE bills them: the paid seconds, at least one minute and per second after, at the
        region's price for the model the VM runs as; its job runs that counted are useful GPU-seconds
        (priced at the floor too), the one a preemption cut short is rework; ``RunResult.bill`` splits the
        dollars by what they bought. ``stop_s``: a preempted VM's stop after ``end``, paid (as waste) if it ran.
        A spot VM taken back in its first minute of RUNNING costs nothing, its stop included (GCE does not bill a
        spot VM, or its GPUs, preempted in its first minute); its seconds still count in ``vm_seconds``."""
        result, cluster = self.result, vm.mig.cluster
        ran = end - vm.job_start_s if preempted and vm.job is not None else 0.0
        lost = ran - kept_s(vm.job, ran) if ran else 0.0
        result.lost_seconds += lost
        deleted_early = vm.phase is VmPhase.DELETING and vm.since < vm.running_s
        paid = 0.0 if deleted_early else max(0.0, end - vm.running_s) + (stop_s if end > vm.running_s else 0.0)
        busy = vm.busy_s + (end - vm.job_start_s if vm.job is not None else 0.0)
        gpus = cluster.gpu_count
        result.rework_gpu_seconds += lost * gpus
        result.useful_gpu_seconds += (busy - lost) * gpus
        result.floor_usd += (busy - lost) * gpus * cluster.floor_usd_per_gpu_s
        ran_job = vm.jobs_run > 0 or vm.job is not None
        boot = vm.booted_s - vm.running_s if ran_job else 0.0
        free = preempted and end - vm.running_s < BILLING_MINIMUM_S
        if vm.mig.usd_per_hour is not None and not free:
            thrown = lost + vm.lost_s  # vm.lost_s: counted as rework already (a gang's other nodes)
            result.bill(billed_seconds(paid), vm.mig.usd_per_hour / 3600.0, busy - thrown, thrown, boot, ran_job)
        result.vm_seconds += paid
        result.wasted_seconds += paid - busy - boot if ran_job else paid

    def _delete_at_once(self, vm: _Vm) -> None:
        """A deletion the world makes for a policy outside its passes (a single-use VM, a cancelled
        loser): a ``deleteInstances`` call and its operation's read, as the manager's port counts them."""
        self.result.api_calls += 2
        self._delete(vm)

    def _delete(self, vm: _Vm) -> None:
        mig, cluster = vm.mig, vm.mig.cluster
        mig.target -= 1
        vm.epoch += 1
        if vm.phase is VmPhase.IDLE:
            cluster.idle[mig.key].pop(vm.name, None)
        if vm.created_s is None:  # never got capacity: gone at once, never paid
            vm.touch()
            mig.waiting.pop(vm.name, None)
            del mig.vms[vm.name], cluster.vms[vm.name]
            if mig.model == "flex-start":  # its resize request goes whole
                for other in self.flex.cancelled(vm):
                    self._delete(other)
            return
        vm.phase, vm.since = VmPhase.DELETING, self.now
        vm.touch()
        delete_s = self.scenario.spec.delete_s
        if delete_s > 0:
            self._push(self.now + delete_s, _GONE, self._gone, vm)
        else:
            self._gone(vm)

    def _gone(self, vm: _Vm) -> None:
        mig = vm.mig
        self._account(vm, self.now)
        self._release(vm)
        vm.touch()
        del mig.vms[vm.name], mig.cluster.vms[vm.name]
        self._capacity_freed(*mig.capacity_key(vm.zone))

    def _release(self, vm: _Vm) -> None:
        key = vm.mig.capacity_key(vm.zone)
        self.used[key] -= 1
        self._billed(-1)
