"""Checks a claim must pass besides the job's own state (``zen.core.lifecycle.decide_heartbeat``): the VM
is not going away, it is in one of the job's regions and carries its ``requires_tags``, it is an instance of
the job's cluster in a region the job may run in, of a provisioning model the job accepts (the one a scaling
pass recorded for the VM, else the one its name tells: its pool's MIG), it carries the tags the job's data needs
(``zen.core.clearance``: computed from the job's data and the configuration now, not the stored tags), a
flex-start VM still runs long enough for the job (``flex_run_left``), its cluster's VMs have the GPUs the job asks
(``gpus_short``), and it has room for the job (a
cluster's ``max_jobs_per_vm``). Both read the VM's rows under its advisory lock,
so two claims from one VM, or a claim and the VM's drain, are checked one after the other.

A refusal's RELEASE names its cause (``refused``), recorded once per VM, job, attempt and cause, and
republishes the start once per cause and VM, except for an ``outranked`` claim (a job of higher priority is
offered to the VM, which gives the start back). Why: docs/reference/configuration.md (several jobs per VM),
docs/explanations/scaling.md (no claim storm), docs/reference/messages.md (ControlMessage), docs/how-to/queues.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable

from zen.core.clearance import for_request
from zen.core.config import ClusterConfig, ZenConfig
from zen.core.lifecycle import Change, Decision, refusal
from zen.core.models import AgentStatus, Heartbeat, Job, JobStatus
from zen.core.provisioning import accepted_models, flex_run_left_s, flex_too_short, only_model, outlasts_flex
from zen.core.reports import refused_floor
from zen.core.routing import next_route
from zen.jobs.placement import gpus_short, regions_cleared_now
from zen.jobs.stranding import CHANGED, held, stranded, why_not_cleared
from zen.jobs.store import repeat_key

if TYPE_CHECKING:
    from zen.jobs.store import JobTx

Offer = Callable[[Job, Decision], None]  # writes a decision about another job in the claim's unit of work

# Causes of a refused claim, told the VM in the RELEASE's attribute ``refused``.
DRAINING = "draining"  # the VM is being scaled down: it takes no more jobs
NO_ROOM = "no-room"  # the VM holds as many jobs or GPUs as it may
NOT_INSTANCE = "not-instance"  # the VM is no instance of the job's cluster's MIG in its region
NOT_CLEARED = "not-cleared"  # the VM's region no longer may run the job
NOT_ACCEPTED = "not-accepted"  # the VM's provisioning model is not one the job accepts
DATA_NOT_CLEARED = "data-not-cleared"  # the VM lacks tags the job's data needs (data_clearance)
FLEX_ENDING = "flex-ending"  # the flex-start VM's run ends before the job's max_runtime_s would
NOT_ALLOWED = "region-not-allowed"  # the VM's region is none of the job's (a start routed where it should not be)
MISSING_TAGS = "missing-tags"  # the VM lacks tags the job requires (requires_tags; an older template's VM)
OUTRANKED = "outranked"  # a job of higher priority waits for a VM like this one: offered to it instead (``outranked``)
NONE_CLEARED = "; none of its regions can run it now: it waits until the configuration has one again, or its user stops it"
OFFER_S = 60.0  # how long a start offered to a VM ahead of a lower-priority job's waits for it, then goes everywhere
OUTRANK_READ = 20  # the jobs of higher priority a claim reads at most (those the VM cannot run passed over)
# A claim published longer ago than this waited out any agent's wait for its answer (ZEN_AGENT_CLAIM_TRIES x
# ZEN_AGENT_CLAIM_TIMEOUT_S, 60 s by default): its agent gave it up (``refuse_claim``).
STALE_CLAIM_S = 300.0


def refuse_claim(tx: JobTx, config: ZenConfig, job: Job, hb: Heartbeat, now: datetime, proven: bool = False,
                 published: datetime | None = None, offer: Offer | None = None,
                 created: datetime | None = None) -> Decision | None:
    """The refusal of a report that would win ``job``'s claim for ``hb.vm``; None when it may win.
    With ``proven`` (the VM's name proven by its token: ``zen.adapters.vm_proof``), a VM that is not an instance
    of the job's cluster's MIG in its region may not claim it: it would run the job on another
    cluster's machine, and a tagged job on a VM not cleared for it (a token proves the VM's name,
    which names its MIG, not what the heartbeat says). Such a claim writes nothing into the job: its start is not
    published again nor widened (any VM could otherwise resend and widen any queued job's start).

    The start is published again, once per cause and VM (the module's docstring). A job offered to warm
    VMs (``zen.core.routing``) that one of them could not take is widened at once (as the tick would later),
    not offered to the same VMs again: a VM being scaled down would refuse every time until it is gone.

    A node of a gang assembling (``job.gang``) repeats its claim while it waits: it was accepted already, and
    is not checked again (a refusal would tell it RELEASE and leave it in the gang, which would then be
    confirmed to a VM that let its claim go: ``zen.core.gang``). A claim Pub/Sub ``published`` more than
    ``STALE_CLAIM_S`` ago (a backlog after an outage of Zen's) is refused: its agent gave it up long since, and
    won, it held the job ASSIGNED to a VM that did not run it until the lost-job sweep spent an attempt on it
    (past the 16 given-back attempts a VM heartbeat names: ``zen.jobs.vm_beats``). With ``offer``, a claim that
    would win, from an agent that gives way (``Heartbeat.gives_way``) and of a start not offered to that VM alone, is
    refused where a job of higher priority waits that the VM could run: that job is offered to it (``outranked``).
    A VM whose agent said RETIRED is deleted next: a claim drawn before that word is refused (``vm_is_draining``), and
    one drawn after is taken for a VM its MIG recreated, unless the VM's token says it is the very VM that said it
    (``created``, its creation time: ``vm_retired_before``): its agent, restarted, forgot its retirement."""
    if job.status is not JobStatus.QUEUED or hb.attempt != job.attempt:
        return None
    if job.gang and any(node.vm == hb.vm for node in job.gang):
        return None
    if published is not None and hb.status is AgentStatus.CLAIMED and (
            age := (now - published).total_seconds()) > STALE_CLAIM_S:  # from a backlog after an outage of Zen's
        given_up = (f"claim published {age:.0f} s ago, longer than an agent waits for its answer: its VM gave it up "
                    "(it would hold the job without running it)")
        return Decision(ignored=given_up, controls=[refusal(job, hb, given_up)])
    cluster, reason = config.cluster(job.cluster), None
    if proven and cluster is not None and not cluster.has_instance(hb.vm, hb.region):
        # Another cluster's VM has no say in this job: nothing is written (no start published again, no widening:
        # else any VM could resend and widen any queued job's start); a claim is told RELEASE, to drop its copy.
        reason = f"VM {hb.vm} is not an instance of cluster {job.cluster}'s MIG in {hb.region}"
        if hb.status is AgentStatus.PREEMPTED:
            return Decision(ignored=reason)
        return Decision(ignored=reason, refused=NOT_INSTANCE, controls=[refusal(job, hb, reason)])
    if hb.status is AgentStatus.PREEMPTED:  # it gives the claim up (zen.core.lifecycle): nothing to refuse
        return None
    elif hb.region not in job.regions:  # decide_heartbeat's checks too, but a cause makes the VM back off
        reason, cause = f"region {hb.region} is not allowed for this job", NOT_ALLOWED
    elif cluster is not None and (model := _unaccepted_model(cluster, job, hb, tx)) is not None:
        accepts = job.request["provisioning"]
        reason, cause = f"VM {hb.vm} is a {model} VM, and the job accepts {accepts} VMs only", NOT_ACCEPTED
    elif hb.region in job.regions and hb.region not in (cleared := regions_cleared_now(config, job)):
        if cleared:
            return _not_cleared(config, job, hb, cleared)
        if not job.gang:  # (a gang with nodes claimed is refused as below: its nodes wait with it)
            return held_uncleared(config, job, hb, now)
        reason, cause = f"{why_not_cleared(config, job, [hb.region])}{NONE_CLEARED}", NOT_CLEARED
    elif cluster is not None and (too_many := cluster.nodes_problem(job.nodes)) is not None:  # limits lowered since
        reason, cause = f"{too_many} ({CHANGED})", NOT_CLEARED
    elif (short := gpus_short(config, job)) is not None:  # gpu_count lowered since: it would run on fewer GPUs
        if not job.gang:
            return _held_claim(job, hb, short, now)
        reason, cause = f"{short}{NONE_CLEARED}", NOT_CLEARED
    elif (uncleared := _data_not_cleared(config, job, hb)) is not None:
        reason, cause = uncleared, DATA_NOT_CLEARED
    elif missing := sorted(set(job.request.get("requires_tags") or ()) - set(hb.tags or ())):
        reason, cause = f"this VM lacks the job's tags {missing}", MISSING_TAGS
    elif tx.vm_is_draining(hb.vm, hb.seq):  # a VM being scaled down is deleted next
        reason, cause = f"VM {hb.vm} is being scaled down", DRAINING
    elif tx.vm_retired_before(hb.vm, created):  # its restarted agent forgot it retired (zen.agent.retired)
        reason, cause = (f"VM {hb.vm} said RETIRED before (the same VM, created {created:%Y-%m-%d %H:%M:%S} UTC, its "
                         "token says): it takes no more jobs and is deleted next"), DRAINING
    elif cluster is not None and (ending := flex_run_left(config, cluster, job, hb.vm, hb.region, tx, now)):
        reason, cause = ending, FLEX_ENDING
    else:
        reason, cause = no_room(config, job, hb.vm, lambda: tx.jobs_on_vm(hb.vm)), NO_ROOM
    if reason is None and offer is not None and cluster is not None and hb.gives_way and not (
            job.start_vms and hb.vm in job.start_vms) and (ahead := outranked(tx, config, cluster, job, hb, now, offer)):
        # The VM gives its copy of the start back (Heartbeat.gives_way): none is published again.
        return Decision(ignored=ahead, refused=OUTRANKED, controls=[refusal(job, hb, ahead)],
                        fields=dict(refused_floor(job.left_vms, hb.vm, hb.seq)))
    if reason is None:
        return None
    if cause in (MISSING_TAGS, DATA_NOT_CLEARED) and cluster is not None and (
            stale := sorted(set(cluster.tags_of(hb.region)) - set(hb.tags or ()))) and tx.drain_unless_busy(
            hb.vm, cluster.name, hb.region, now):  # idle, it was counted as the job's VM: no other was asked for
        reason += f"; VM {hb.vm} is scaled down: its template is older than {hb.region}'s tags {stale}"
    controls = [refusal(job, hb, reason)]
    # The VM drops its copy of the start: this claim delivered again later (its cause gone by then) is a late copy.
    left: dict[str, Any] = dict(refused_floor(job.left_vms, hb.vm, hb.seq))
    if _refused_since_published(tx, config, job, hb, cause):  # the tick publishes it again
        due = job.widen_at is not None and job.widen_at <= now
        return Decision(ignored=reason, refused=cause, controls=controls,
                        fields=left if due else {**left, "widen_at": now})
    fields, note = left, None
    if job.start_vms and hb.vm in job.start_vms:
        route = next_route(config, job, now)
        fields, note = {**left, **route.fields()}, f"{route.note} (its claim refused: {reason})"
    return Decision(ignored=reason, publish_start=True, fields=fields, note=note, controls=controls, refused=cause)


def outranked(tx: JobTx, config: ZenConfig, cluster: ClusterConfig, job: Job, hb: Heartbeat, now: datetime,
              offer: Offer) -> str | None:
    """Why ``hb.vm``'s claim of ``job``, which would win, goes to another job: a QUEUED job of higher priority
    waits that the VM could run (the highest priority, then the oldest, of the first ``OUTRANK_READ`` by priority
    and age: ``JobTx.queued_jobs_outranking``; read again under its lock, taken in priority order), and
    is offered to the VM (``offer``: written in this unit of work) for ``OFFER_S``, then sent everywhere
    (``zen.core.routing.next_route``). None: the claim stands. Agents pull starts about in the order they were
    published, whatever their priority: without this an admitted job of priority 10 waited for a VM behind every
    older job of priority 0 of its regions. A job offered to other VMs already is passed over until its offer is
    due to widen (one VM at a time is asked to take it); one offered to this VM already is offered again.
    Single-VM jobs only: a gang's nodes claim in any order. A VM shared by several jobs (``max_jobs_per_vm``)
    gives way only where it has room for the other job now and would have none beside this one: where both fit,
    the claim stands."""
    if job.nodes > 1 or job.gang or hb.status is not AgentStatus.CLAIMED:
        return None
    held: dict[str, int] | None = None  # the jobs the VM holds: read once, for a shared VM's candidates
    for found in tx.queued_jobs_outranking(job.cluster, job.priority, hb.vm, now, OUTRANK_READ):
        if hb.region not in (found.start_regions or found.regions) or not _may_take(tx, config, cluster, found, hb, now):
            continue
        if cluster.max_jobs_per_vm > 1 and not _crowds_out(config, cluster, job, found, hb.vm, held := (
                tx.jobs_on_vm(hb.vm) if held is None else held)):
            continue
        # Read again under its lock, never waited for: the claim of it by this same VM holds its row and waits for
        # the VM's lock, which this claim holds (vm_is_draining). Claimed, or offered to other VMs, since?
        other = tx.lock_job_unless_held(found.job_id)
        if other is None or other.status is not JobStatus.QUEUED or other.attempt != found.attempt:
            continue
        pending = other.start_vms and (other.widen_at is None or other.widen_at > now)  # an offer not due to widen
        if pending and hb.vm not in (other.start_vms or ()):
            continue
        # Offered to this VM already (a later try of a claim refused for it, or its offer read before that RELEASE
        # and dropped): refused again, the offer sent again; the older job never wins the VM meanwhile.
        offer(other, Decision(publish_start=True) if pending else Decision(
            publish_start=True, fields=dict(start_vms=[hb.vm], start_regions=None,
                                            widen_at=now + timedelta(seconds=OFFER_S)),
            note=f"start offered to VM {hb.vm} first, ahead of {_by_queue(job)} it claimed; "
                 f"widened after {OFFER_S:g} s unclaimed"))
        return (f"{_by_queue(other)} waits for a VM in {hb.region}: it is offered to "
                f"VM {hb.vm} first; this job (priority {job.priority}) waits for the next")
    return None


def _by_queue(job: Job) -> str:
    """The other job of an outranked claim, by its queue and priority, not its id: each job's people (its owner, its
    queue's members) may not see the other (docs/how-to/console.md), yet each one's history or refusal names it."""
    return f"a job{f' of queue {job.queue}' if job.queue else ''} (priority {job.priority})"


def _may_take(tx: JobTx, config: ZenConfig, cluster: ClusterConfig, job: Job, hb: Heartbeat, now: datetime) -> bool:
    """Whether ``hb.vm``, whose claim of another job passed the VM's own checks, would pass the checks of ``job``'s
    (its region cleared, its model accepted, its tags, its data's, a flex-start VM's run): nothing is written."""
    return (hb.region in job.regions and hb.region in regions_cleared_now(config, job)
            and _unaccepted_model(cluster, job, hb, tx) is None and cluster.nodes_problem(job.nodes) is None
            and gpus_short(config, job) is None
            and _data_not_cleared(config, job, hb) is None
            and not set(job.request.get("requires_tags") or ()) - set(hb.tags or ())
            and flex_run_left(config, cluster, job, hb.vm, hb.region, tx, now) is None)


def _crowds_out(config: ZenConfig, cluster: ClusterConfig, job: Job, other: Job, vm: str, held: dict[str, int]) -> bool:
    """Whether a shared ``vm`` taking ``job`` leaves no room for ``other``, which fits on it now: beside the jobs it
    holds (``held``: job id -> GPUs), but not beside those and ``job`` too."""
    return no_room(config, other, vm, lambda: held) is None and no_room(
        config, other, vm, lambda: {**held, job.job_id: job.gpus or cluster.gpu_count}) is not None


def _unaccepted_model(cluster: ClusterConfig, job: Job, hb: Heartbeat, tx: JobTx) -> str | None:
    """The provisioning model of ``hb.vm`` when the job does not accept it; None when it does, or when none is known
    (a VM of no MIG of the cluster's). The model a scaling pass recorded for the VM, else the one its name tells (its
    pool's MIG): the primary MIG keeps its name when the cluster's models are reordered, or narrowed to one, and its
    VMs booted before kept theirs (a spot VM was taken for standard, and a job accepting standard VMs only ran on it).
    Read for a cluster of one model too: it may have had more when the VM booted. Not the recorded one once a pass saw
    that VM stop (``JobTx.vm_model``): its MIG recreates it under the name from the template its name now means. A job
    that names no model (or ``any``) accepts the VM's whatever it is, one its cluster no longer lists too (a VM left
    from before, billed all the same)."""
    if only_model(accepts := job.request.get("provisioning")) is None:
        return None
    model = tx.vm_model(hb.vm) or cluster.model_of(hb.vm, hb.region)
    return model if model is not None and model not in accepted_models(accepts, cluster.provisioning) else None


def flex_run_left(config: ZenConfig, cluster: ClusterConfig, job: Job, vm: str, region: str, tx: JobTx,
                  now: datetime) -> str | None:
    """Why flex-start VM ``vm`` may not take ``job``: its run (``flex_start_run_s``, counted from when a scaling pass
    first saw its VM RUNNING or from its agent's first word less the cluster's boot estimate, the earlier) ends
    before the job's ``max_runtime_s`` and ``deadlines.flex_end_margin_s`` after it would (its stop grace, last
    checkpoint, outputs' upload and report: ``flex_too_short``), and GCE would end the job there (a rerun from its
    last checkpoint, or from the start, its finished work uploaded or not). A job whose request names no
    ``max_runtime_s`` (stored as the configured cap, ``limits.max_runtime_s``: how long it runs is not known, and most
    jobs run far less than the cap) is held to the margin alone: a VM within it of its run's end started such a job
    only for GCE to cut it minutes later, the VM's last minutes billed for nothing. None for any other VM, and a VM
    that has run for less than ``FLEX_FRESH_S`` past
    the boot estimate (the VM asked for the job: ``zen.core.provisioning.flex_run_left_s``). The job waits for
    another VM: the planner counts no VM for it whose run ends first (``zen.scaling.flexrun``), so it asks for one,
    and the refusing VM is scaled down once idle and needed by no other job, as any idle VM is. The VM's model is the
    one a scaling pass recorded for it, as ``_unaccepted_model`` reads it: a flex-start VM of a primary MIG whose
    cluster's models were reordered, or narrowed to ones without flex-start, since is still one."""
    named = job.request.get("max_runtime_s")
    # Read for a cluster that lists flex-start no more too: its primary MIG's VMs booted as flex-start stay so.
    if (tx.vm_model(vm) or cluster.model_of(vm, region)) != "flex-start":  # (_unaccepted_model's)
        return None
    if named is not None and outlasts_flex(named, cluster.flex_start_run_s):  # no flex-start VM lives that long, a fresh one neither
        return (f"VM {vm} is a flex-start VM, whose run ends after {cluster.flex_start_run_s} s (flex_start_run_s), "
                f"less than the job's max_runtime_s {named}")
    left = flex_run_left_s(cluster.flex_start_run_s, now, *tx.vm_run_marks(vm), config.scaling.boot_estimate_s)
    margin = config.deadlines.flex_end_margin_s
    if not flex_too_short(left, named or 0, margin):
        return None
    return (f"VM {vm} is a flex-start VM with about {max(int(left or 0), 0)} s of its run left (flex_start_run_s "
            f"{cluster.flex_start_run_s}), less than " + (f"the job's max_runtime_s {named} and " if named else "")
            + f"the {margin:g} s kept after it for its stop, last checkpoint and outputs' upload "
            "(deadlines.flex_end_margin_s)" + ("" if named else ": the job names no max_runtime_s"))


def _data_not_cleared(config: ZenConfig, job: Job, hb: Heartbeat) -> str | None:
    """Why ``hb.vm`` may not read the job's data: the tags it reports (its template's) lack some the data
    needs; None when it carries them all. Defence in depth: the stored ``requires_tags`` already hold them
    unless the row was written without them (the submission widens them: ``zen.jobs.placement``)."""
    clearance = for_request(config.data_clearance, job.request)
    missing = sorted(set(clearance.tags) - set(hb.tags or ())) if clearance else []
    return f"VM {hb.vm} lacks the tags {missing}: {clearance.because()}" if clearance and missing else None


def _refused_since_published(tx: JobTx, config: ZenConfig, job: Job, hb: Heartbeat, cause: str) -> bool:
    """Whether a claim of this attempt by ``hb.vm`` was refused for ``cause`` since the job's start was
    last published (the refusal's row, written after the refusal that published it)."""
    if job.start_published_at is None:
        return False
    key = repeat_key(hb.vm, job.job_id, hb.attempt, cause)
    seen = tx.rejection_last_seen(config.topics.heartbeats, key)
    return seen is not None and seen >= job.start_published_at


def _not_cleared(config: ZenConfig, job: Job, hb: Heartbeat, cleared: list[str]) -> Decision:
    """A claim from one of the job's regions that the configuration no longer allows it (a tag moved, or
    the region left its cluster, after the job was accepted): the VM's own word about its tags comes from
    the template it booted with, and a tagged job must not run where the tag is not now. The job is
    narrowed to the regions still allowed (``cleared``) and its start published there (else the same VMs
    would claim it again and again). With none left (``refuse_claim``), the claim is refused as any other and
    the job waits, as one no VM can take after a configuration change does (docs/how-to/operate.md): a change
    applied to the functions before terraform destroyed the old MIGs, or undone, would have lost it."""
    reason = why_not_cleared(config, job, [hb.region])
    return Decision(ignored=reason, publish_start=True, controls=[refusal(job, hb, reason)],
                    note=f"regions now {cleared}: {reason}",
                    fields=dict(regions=cleared, start_regions=None, start_vms=None, widen_at=None), refused=NOT_CLEARED)


def held_uncleared(config: ZenConfig, job: Job, hb: Heartbeat, now: datetime) -> Decision:
    """A claim from one of the job's regions when none of them may run it now (a tag it requires left them, or a
    ``data_clearance`` binding added since needs tags none carries): the claim is refused and the job goes back
    to PENDING, held (``stranding.held``, looked at again every ``UNCLEARED_RECHECK_S`` by the tick's
    ``retry_due``, let go into the regions cleared by then). Left QUEUED, it stayed demand in its old regions: the
    VM booted for it was kept idle, billed, while each of its claims was refused."""
    return _held_claim(job, hb, why_not_cleared(config, job, [hb.region]), now)


def _held_claim(job: Job, hb: Heartbeat, why: str, now: datetime) -> Decision:
    """``hb.vm``'s claim refused, no VM may run the job now (``why``), and the job held (``stranding.held``): as
    ``held_uncleared``, and for a job asking more GPUs than its cluster's VMs have now (``gpus_short``)."""
    hold, refused = held(why, now), f"{why}{NONE_CLEARED}"
    return Decision(changes=hold.changes, controls=[refusal(job, hb, refused)], ignored=refused, refused=NOT_CLEARED,
                    fields=dict(refused_floor(job.left_vms, hb.vm, hb.seq), **hold.fields))


def recleared(config: ZenConfig, job: Job, now: datetime) -> Decision | None:
    """A QUEUED job allowed regions the configuration no longer lets it run in (a tag it requires left them while
    it waited), looked at by the tick before the scaling pass counts it (``zen.jobs.sweeps``): narrowed to the
    regions cleared now, its start sent there (as at a claim from a dropped region: ``_not_cleared``), or, with none
    left, held as at such a claim (``held_uncleared``): no VM is asked for where it cannot run. One allowed fewer
    regions than it may run in now (a region added to its cluster since, its request naming none) is widened to
    them, its start sent again unless it goes to a few regions or VMs for now (``zen.core.routing``, which widens it
    to them later). One nothing configured can run, wherever it may run (``stranding.stranded``: its cluster, model or
    regions gone, a gang above its cluster's lowered limits, more GPUs of a VM than its cluster's VMs have now), is
    held as at such a claim (``stranding.held``). None: nothing dropped or added (a gang with nodes claimed waits with
    them: its claims are refused as they come)."""
    if job.status is not JobStatus.QUEUED or job.gang:
        return None
    if (why := stranded(config, job)) is not None:
        return held(why, now)
    cleared = regions_cleared_now(config, job)
    dropped = [r for r in job.regions if r not in cleared]
    added = [r for r in cleared if r not in job.regions]
    if not (dropped or added):
        return None
    if not dropped:
        routed = job.start_regions is not None or bool(job.start_vms)
        return Decision(publish_start=not routed, fields=dict(regions=cleared), note=(
            f"regions now {cleared}: cluster {job.cluster} runs in {', '.join(added)} too (the configuration changed)"))
    why = why_not_cleared(config, job, dropped)
    if not cleared:
        return held(why, now)
    return Decision(publish_start=True, note=f"regions now {cleared}: {why}",
                    fields=dict(regions=cleared, start_regions=None, start_vms=None, widen_at=None))


def no_room(config: ZenConfig, job: Job, vm: str, jobs_on_vm: Callable[[], dict[str, int]]) -> str | None:
    """Why ``vm`` has no room for ``job`` (``jobs_on_vm()``: job id -> GPUs of the jobs it holds,
    read only for a cluster whose VMs take several jobs); None when it has room."""
    cluster = config.cluster(job.cluster)
    if cluster is None or cluster.max_jobs_per_vm == 1:
        return None
    others = [gpus or cluster.gpu_count for job_id, gpus in jobs_on_vm().items() if job_id != job.job_id]
    if not others:
        return None
    if len(others) >= cluster.max_jobs_per_vm:
        return (f"VM {vm} already runs {len(others)} jobs, the most cluster {cluster.name} allows "
                f"(max_jobs_per_vm {cluster.max_jobs_per_vm})")
    free, needs = cluster.gpu_count - sum(others), job.gpus or cluster.gpu_count
    if needs > free:
        return f"VM {vm} has {max(free, 0)} of its {cluster.gpu_count} GPUs free; the job needs {needs}"
    return None
