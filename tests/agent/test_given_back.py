"""The agent's side of a claim given back unanswered (zen.jobs.vm_beats): its VM heartbeats name the
attempt until it is claimed again, in the order of the seqs Zen compares, and a claim made again
takes only the answers to its own CLAIMEDs. Against the fake transport (the last test: wired to the
real functions, whose answers it delivers or holds back); the real runner runs the jobs."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.agent.fakes import FakeTransport
from tests.agent.helpers import job_command, one_running
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, make_agent, start_message
from tests.messages import heartbeat, job_request
from zen.agent.agent import Agent
from zen.agent.transport import ControlDelivery
from zen.core.models import AgentStatus, ControlAction, Heartbeat
from zen.core.vm_heartbeat import VmHeartbeat
from zen.store import repository

QUICK = replace(SETTINGS, claim_timeout_s=0.2)


def sent(transport: FakeTransport) -> list[tuple]:
    """Every report and VM heartbeat in publish order: (seq, what, given_back) with ``what`` a job
    report's status or a VM heartbeat's state."""
    out = []
    for message in transport.published:
        if isinstance(message, Heartbeat):
            out.append((message.seq, message.status.value, None))
        else:
            assert isinstance(message, VmHeartbeat)
            named = [(held.job_id, held.attempt) for held in message.given_back] if message.given_back else None
            out.append((message.seq, message.state.value, named))
    return out


def claims(transport: FakeTransport) -> list[Heartbeat]:
    return [m for m in transport.published if isinstance(m, Heartbeat) and m.status is AgentStatus.CLAIMED]


def test_a_claim_given_back_unanswered_is_named_in_vm_heartbeats_until_the_attempt_is_claimed_again():
    """Zen compares the heartbeat's seq with the claim's: the heartbeat that names the attempt is sent at
    once after it was given back, later than every CLAIMED before it and earlier than the next claim's."""
    transport = FakeTransport(VM, virtual_time=False)
    first, again = transport.add_start(start_message()), transport.add_start(start_message())

    def zen(message):  # the first claim's answers never reach the agent; the second's do
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and len(claims(transport)) > 3:
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        return []

    transport.answer = zen
    agent = make_agent(transport, QUICK)

    assert agent.run() == 0 and agent.jobs_run == 1
    assert ("nack", first) in transport.calls and ("ack", again) in transport.calls
    seqs = [seq for seq, _, _ in sent(transport)]
    assert seqs == sorted(set(seqs))  # one counter for reports and VM heartbeats
    assert one_running([(what, named) for _, what, named in sent(transport)]) == [
        ("IDLE", None),
        ("CLAIMED", None), ("CLAIMED", None), ("CLAIMED", None),  # unanswered: the start given back
        ("IDLE", [("j1", 1)]),  # at once: Zen requeues the attempt if that claim won
        ("CLAIMED", None),  # the start came back: claimed again, and off the list
        ("BUSY", None), ("RUNNING", None), ("SUCCEEDED", None), ("IDLE", None), ("STOPPING", None)]


def test_a_late_answer_to_a_claim_given_up_is_ignored_when_the_attempt_is_claimed_again():
    """The CONFIRM of the first claim arrives while the agent claims the attempt again. Zen may have
    requeued the attempt meanwhile (the VM heartbeat between the claims named it) and another VM may
    have won it: only the answer to the new claim counts, here RELEASE, and the job does not run."""
    transport = FakeTransport(VM, virtual_time=False)
    first, again = transport.add_start(start_message()), transport.add_start(start_message())

    def zen(message):
        sent_claims = claims(transport)
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and len(sent_claims) == 4:
            return [transport.answer_to(message, ControlAction.CONFIRM, answers=sent_claims[0].seq),
                    transport.answer_to(message, ControlAction.RELEASE)]
        return []

    transport.answer = zen
    agent = make_agent(transport, QUICK)

    assert agent.run() == 0
    assert agent.jobs_run == 0
    assert [what for _, what, _ in sent(transport) if what not in ("IDLE", "STOPPING")] == ["CLAIMED"] * 4
    assert ("control_ack", "j1", "CONFIRM") in transport.calls and ("ack", again) in transport.calls
    assert ("nack", first) in transport.calls


def test_an_attempt_this_vm_ran_is_never_named_as_given_back():
    """A copy of a start the VM already ran comes back. Its RUNNING and final reports may still be on
    their way: named as given back, the attempt could be requeued and run again. The copy is not even
    claimed (tests/agent/test_copies.py), so no claim of it can go unanswered."""
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message())
    transport.add_start(start_message())

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and len(claims(transport)) == 1:
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        return []

    transport.answer = zen
    agent = make_agent(transport, QUICK)

    assert agent.run() == 0 and agent.jobs_run == 1
    assert [what for _, what, _ in sent(transport) if what == "CLAIMED"] == ["CLAIMED"]
    assert all(named is None for _, _, named in sent(transport))


class ToZen(FakeTransport):
    """An agent's transport wired to Zen's functions: its reports are posted to ``on_heartbeat``, and
    Zen's orders to its VM come back on its control queue, or, while ``late``, are held back (the
    answers that reach the VM after it gave up)."""

    def __init__(self, vm: str, functions, publisher):
        super().__init__(vm, virtual_time=False)
        self.functions, self.publisher = functions, publisher
        self.late = False
        self.held_back: list[ControlDelivery] = []
        self._read = 0

    def publish(self, message, *, budget_s: float, **abandon) -> None:
        super().publish(message, budget_s=budget_s)
        self.functions.heartbeat(json.loads(message.to_bytes()))
        mine = [m for m in self.publisher.on("zen-vm-control") if m.attributes["vm"] == self.vm]
        for order in mine[self._read:]:
            delivery = ControlDelivery(f"z-{id(order)}", order.data, order.attributes, lambda: None)
            (self.held_back if self.late else self.controls).append(delivery)
        self._read = len(mine)


def test_with_zen_a_claim_answered_too_late_is_requeued_and_runs_on_another_vm_as_the_same_attempt(
        functions, zen, publisher):
    """The whole story: VM A's claim wins but Zen's CONFIRM comes too late; A gives the start back and
    says so; B takes the start Zen publishes again and runs the job, its one attempt unspent."""
    functions.submit(job_request("job-1", max_attempts=1, command=job_command("--print", "hello")))
    vms = {}
    for vm in ("vm-a", "vm-b"):
        transport = ToZen(vm, functions, publisher)
        agent = Agent(replace(IDENTITY, vm=vm), QUICK, transport, local=True, clock=transport.clock)
        transport.when_idle = lambda agent=agent: agent.request_shutdown("test over")
        vms[vm] = (agent, transport)
    (agent_a, a), (agent_b, b) = vms["vm-a"], vms["vm-b"]
    a.late = True
    a.add_start(publisher.on("zen-job-start")[0].data)

    assert agent_a.run() == 0 and agent_a.jobs_run == 0
    assert [json.loads(d.data)["action"] for d in a.held_back] == ["CONFIRM"] * 3  # too late, all of them
    with zen.db.transaction() as session:
        record = repository.get_job(session, "job-1")
    assert (record.status.value, record.attempt, record.vm) == ("QUEUED", 1, None)

    b.add_start(publisher.on("zen-job-start")[-1].data)
    assert agent_b.run() == 0 and agent_b.jobs_run == 1
    with zen.db.transaction() as session:
        record = repository.get_job(session, "job-1")
        steps = [(r["from_status"], r["to_status"]) for r in repository.job_history(session, "job-1")]
    assert (record.status.value, record.attempt, record.max_attempts, record.vm) == ("SUCCEEDED", 1, 1, "vm-b")
    assert steps[2:] == [("QUEUED", "ASSIGNED"), ("ASSIGNED", "QUEUED"), ("QUEUED", "ASSIGNED"),
                         ("ASSIGNED", "RUNNING"), ("RUNNING", "SUCCEEDED")]


class SecondTryHeld(ToZen):
    """A VM whose claim's first try is answered RELEASE only after its second try was sent, and whose
    second try reaches Zen only when the test delivers it (``deliver_held``)."""

    def __init__(self, vm: str, functions, publisher):
        super().__init__(vm, functions, publisher)
        self.late = True  # the first try's answer is on its way
        self.held_try: Heartbeat | None = None

    def publish(self, message, *, budget_s: float, **abandon) -> None:
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and self.late:
            if self.held_back:  # the second try: its delivery held; the first try's RELEASE arrives now
                FakeTransport.publish(self, message, budget_s=budget_s)
                self.held_try, self.late = message, False
                self.controls.extend(self.held_back)
                return
        super().publish(message, budget_s=budget_s)

    def deliver_held(self) -> None:
        assert self.held_try is not None
        self.functions.heartbeat(json.loads(self.held_try.to_bytes()))


def test_with_zen_a_released_claims_later_try_that_wins_the_requeued_attempt_is_given_back(functions, zen, publisher):
    """VM B's claim lost to A's: told RELEASE, B dropped the start, but its second try was sent before the
    RELEASE came. A gave the attempt back (requeued, unspent); B's second try, delivered only then, won
    it for a VM that does not run it. It waited ASSIGNED until the sweep spent the attempt (FAILED, never
    run, at ``max_attempts: 1``). B's VM heartbeats now name a released claim as one given back, so the
    next one after that try requeues the attempt, its budget untouched."""
    functions.submit(job_request("job-1", max_attempts=1, command=job_command("--print", "hello")))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1_767_225_600_000, vm="vm-a"))  # A's claim wins
    b = SecondTryHeld("vm-b", functions, publisher)
    agent_b = Agent(replace(IDENTITY, vm="vm-b"), QUICK, b, local=True, clock=b.clock)
    b.when_idle = lambda: agent_b.request_shutdown("test over")
    b.add_start(publisher.on("zen-job-start")[0].data)

    assert agent_b.run() == 0 and agent_b.jobs_run == 0
    assert [m.status for m in claims(b)] == [AgentStatus.CLAIMED] * 2 and b.held_try is not None
    assert (job_row(zen).status.value, job_row(zen).vm) == ("ASSIGNED", "vm-a")
    beats = [m for m in b.published if isinstance(m, VmHeartbeat)]
    assert beats[-1].given_back and [(h.job_id, h.attempt) for h in beats[-1].given_back] == [("job-1", 1)]

    functions.heartbeat({"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1",
                         "zone": "us-central1-a", "state": "IDLE", "seq": 1_767_225_660_000,
                         "sent_at": "2026-11-23T12:00:00Z", "given_back": [{"job_id": "job-1", "attempt": 1}]})
    assert (job_row(zen).status.value, job_row(zen).vm) == ("QUEUED", None)  # A gave it back
    b.deliver_held()  # B's second try, sent before its RELEASE came
    assert (job_row(zen).status.value, job_row(zen).vm) == ("ASSIGNED", "vm-b")

    functions.heartbeat(json.loads(beats[-1].to_bytes()))  # B's next VM heartbeat
    record = job_row(zen)
    assert (record.status.value, record.attempt, record.max_attempts, record.vm) == ("QUEUED", 1, 1, None)
    with zen.db.transaction() as session:
        *_, last = repository.job_history(session, "job-1")
    assert (last["from_status"], last["to_status"]) == ("ASSIGNED", "QUEUED") and "vm-b dropped its claim" in last["reason"]


def job_row(zen, job_id="job-1"):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)
