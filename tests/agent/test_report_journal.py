"""An attempt's final report outlives the agent that sends it (``zen.agent.journal``): an agent killed
after its job ended (SIGKILL, the OOM killer) lost the report it was still publishing; the agent
systemd restarted knew nothing of it, and Zen, hearing nothing, took the attempt for lost and ran the
job again. Here an agent "dies" by a ``Killed`` raised from its final report's
publish, which nothing in the agent catches; a new agent on the same work directory plays the restart."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.agent import Agent
from zen.agent.journal import SEQ_FLOOR
from zen.agent.runner import attempt_name
from zen.core.models import AgentStatus, ControlAction, Heartbeat

OTHER_VM = "vm-other"


class Killed(BaseException):
    """The agent dying mid-publish: not an Exception, so nothing in the agent catches it."""


class Recording(FakeTransport):
    """Records publishes and pulls in one list (``events``), in order; ``die`` kills the agent when its
    first final report is published (``died_with``); ``journaled`` holds what the journal held then."""

    def __init__(self, vm: str, *, work: Path, die: bool = False, fail_final: bool = False,
                 virtual_time: bool = True):
        super().__init__(vm, virtual_time=virtual_time)
        self.work, self.die, self.fail_final = work, die, fail_final
        self.events: list[tuple] = []
        self.died_with: Heartbeat | None = None
        self.journaled: list[dict] = []

    def publish(self, message, *, budget_s: float, **abandon) -> None:
        if self.died_with is not None:  # (the agent's shutdown, run as Killed unwinds it): a dead agent sends nothing
            raise Killed
        final = isinstance(message, Heartbeat) and message.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)
        if final:
            self.journaled = [json.loads(p.read_text()) for p in journal_files(self.work)]
        if final and self.die and self.died_with is None:
            self.died_with = message
            raise Killed
        if final and self.fail_final:
            self.fail_publish = 1
        super().publish(message, budget_s=budget_s)
        self.events.append(("publish", message))

    def pull_start(self):
        self.events.append(("pull",))
        return super().pull_start()


def first_final_fails(transport: Recording, on_fail: Callable[[Heartbeat], object] = lambda message: None,
                      on_sent: Callable[[Heartbeat], object] = lambda message: None) -> list[Heartbeat]:
    """The first SUCCEEDED ``transport`` is asked to publish is not taken (its budget ran out: kept), ``on_fail`` called
    as it fails and ``on_sent`` at each SUCCEEDED sent after it; returns the one that failed, once it has."""
    publish, failed = transport.publish, []

    def publishing(message, *, budget_s, **abandon):
        final = isinstance(message, Heartbeat) and message.status is AgentStatus.SUCCEEDED
        transport.fail_final = final and not failed
        if transport.fail_final:
            failed.append(message)
            on_fail(message)
        elif final:
            on_sent(message)
        return publish(message, budget_s=budget_s)

    transport.publish = publishing
    return failed


def journal_files(work: Path) -> list[Path]:
    return sorted(p for p in work.rglob("*") if p.is_file() and ".reports" in p.parts
                  and not p.name.endswith(SEQ_FLOOR))  # the VM's seq floor, kept for good (Journal.drew)


def agent_on(transport: Recording, vm: str = VM) -> Agent:
    agent = Agent(replace(IDENTITY, vm=vm), replace(SETTINGS, work_dir=str(transport.work)), transport, local=True,
                  clock=transport.clock)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    return agent


def dies_stopped_while_claiming(work: Path, vm: str = VM, job_id: str = "j1") -> Heartbeat:
    """An agent told STOP while claiming dies publishing its STOPPED (``zen.agent.claim``); returns it."""
    transport = Recording(vm, work=work, die=True)
    transport.add_start(start_message(job_id))
    transport.order(job_id, 1, ControlAction.STOP, "user stop")
    with pytest.raises(Killed):
        agent_on(transport, vm).run()
    assert transport.died_with is not None and transport.died_with.status is AgentStatus.STOPPED
    return transport.died_with


def restart(work: Path, vm: str = VM) -> Recording:
    transport = Recording(vm, work=work)
    assert agent_on(transport, vm).run() == 0
    return transport


def job_reports(transport: Recording) -> list[Heartbeat]:
    return [event[1] for event in transport.events if event[0] == "publish" and isinstance(event[1], Heartbeat)]


def died_after_its_job(work: Path, agent_of: Callable[[Recording], Agent] = agent_on) -> Recording:
    """An agent whose job exits 0 and that dies publishing its SUCCEEDED (kept in its journal): its transport."""
    dying = Recording(VM, work=work, die=True, virtual_time=False)
    dying.add_start(start_message())
    dying.answer = confirm_claims(VM)
    with pytest.raises(Killed):
        agent_of(dying).run()
    return dying


def test_a_final_report_the_dead_agent_could_not_publish_is_published_by_the_next_one_before_it_pulls(tmp_path):
    work = tmp_path / "work"
    dying = died_after_its_job(work)
    lost = dying.died_with
    assert (lost.status, lost.exit_code) == (AgentStatus.SUCCEEDED, 0)
    earlier = [m.seq for m in job_reports(dying)]
    assert earlier and max(earlier) < lost.seq  # CLAIMED, RUNNING...: the final report is the attempt's last

    again = restart(work)

    assert again.events[0] == ("publish", lost)  # the same report, its seq kept: Zen applies it once
    assert ("pull",) in again.events and [m for m in job_reports(again)] == [lost]
    assert journal_files(work) == []


@pytest.mark.parametrize("how", ["the job ran", "stopped while claiming"])
def test_a_final_report_is_journaled_while_it_is_published_and_the_file_goes_once_it_is(tmp_path, how):
    work = tmp_path / "work"
    transport = Recording(VM, work=work, virtual_time=how == "stopped while claiming")
    transport.add_start(start_message())
    if how == "the job ran":
        transport.answer = confirm_claims(VM)
    else:
        transport.order("j1", 1, ControlAction.STOP, "user stop")

    assert agent_on(transport).run() == 0

    [final] = [m for m in job_reports(transport) if m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)]
    assert final.status is (AgentStatus.SUCCEEDED if how == "the job ran" else AgentStatus.STOPPED)
    [kept] = transport.journaled  # written before its publish...
    assert Heartbeat.model_validate(kept["report"]) == final
    assert journal_files(work) == []  # ...and removed once it was published
    assert restart(work).events.count(("publish", final)) == 0


def test_a_final_report_whose_budget_ran_out_is_logged_and_kept_for_the_next_agent(tmp_path, caplog):
    """It was removed, lost: an agent restarted then (an upgrade, a reboot) sent nothing, and Zen, hearing
    nothing, took the attempt for lost and ran the job again although it had ended."""
    work = tmp_path / "work"
    transport = Recording(VM, work=work, fail_final=True)
    transport.add_start(start_message())
    transport.order("j1", 1, ControlAction.STOP, "user stop")

    with caplog.at_level(logging.ERROR, logger="zen.agent.journal"):
        assert agent_on(transport).run() == 0

    assert [m.status for m in job_reports(transport)] == [AgentStatus.CLAIMED]
    assert len(transport.journaled) == 1
    kept, again = [r for r in caplog.records if r.name == "zen.agent.journal"]  # again: at the agent's shutdown
    assert "kept, to be sent again" in kept.getMessage() and (kept.job_id, kept.status) == ("j1", "STOPPED")
    assert "not sent again; kept" in again.getMessage() and (again.job_id, again.status) == ("j1", "STOPPED")
    assert len(journal_files(work)) == 1
    assert [m.status for m in job_reports(restart(work))] == [AgentStatus.STOPPED] and journal_files(work) == []


def test_agents_sharing_a_work_dir_publish_again_only_their_own_vms_reports(tmp_path):
    work = tmp_path / "work"
    mine = dies_stopped_while_claiming(work)
    others = dies_stopped_while_claiming(work, OTHER_VM, "j2")

    assert job_reports(restart(work)) == [mine]
    [left] = journal_files(work)  # the other VM's, untouched
    assert Heartbeat.model_validate(json.loads(left.read_text())["report"]) == others
    assert job_reports(restart(work, OTHER_VM)) == [others]
    assert journal_files(work) == []


def test_a_report_an_agent_alive_is_publishing_is_left_to_it(tmp_path):
    work = tmp_path / "work"
    seen: list[int] = []

    class Slow(Recording):  # while its final report is published, an agent of the same name starts
        def publish(self, message, *, budget_s, **abandon):
            if isinstance(message, Heartbeat) and message.status is AgentStatus.STOPPED:
                seen.append(len(journal_files(work)))
                seen.append(len(job_reports(restart(work))))
            super().publish(message, budget_s=budget_s)

    transport = Slow(VM, work=work)
    transport.add_start(start_message())
    transport.order("j1", 1, ControlAction.STOP, "user stop")
    assert agent_on(transport).run() == 0

    assert seen == [1, 0]  # journaled, and not taken by the other agent
    assert [m.status for m in job_reports(transport)] == [AgentStatus.CLAIMED, AgentStatus.STOPPED]
    assert journal_files(work) == []


def test_the_work_dir_sweep_never_removes_the_journal(tmp_path):
    work = tmp_path / "work"
    lost = dies_stopped_while_claiming(work)
    stale = work / attempt_name("crashed", 2)  # an attempt directory a dead agent left
    (stale / "inputs").mkdir(parents=True)
    [kept] = journal_files(work)

    agent_on(Recording(VM, work=work))._sweep_work_dir()

    assert not stale.exists() and journal_files(work) == [kept]
    assert job_reports(restart(work)) == [lost]


def test_a_report_left_too_long_ago_is_dropped_unsent(tmp_path, caplog):
    work = tmp_path / "work"
    dies_stopped_while_claiming(work)
    [kept] = journal_files(work)
    record = json.loads(kept.read_text())
    kept.write_text(json.dumps({**record, "written_at": record["written_at"] - 2 * 86400}))

    with caplog.at_level(logging.WARNING, logger="zen.agent.journal"):
        assert job_reports(restart(work)) == []

    assert any("too old" in r.getMessage() for r in caplog.records if r.name == "zen.agent.journal")
    assert journal_files(work) == []


def test_a_report_the_next_agent_cannot_send_either_is_kept_for_the_one_after(tmp_path):
    """Pub/Sub unreachable when the agent starts: the report was removed unsent, and a late final report
    (which Zen still takes while the job's next attempt is unclaimed) was lost for good."""
    work = tmp_path / "work"
    lost = dies_stopped_while_claiming(work)
    cut_off = Recording(VM, work=work)
    cut_off.fail_publish = 10**6  # every publish fails, the replay's too
    agent_on(cut_off).run()
    assert len(journal_files(work)) == 1

    again = restart(work)

    assert again.events[0] == ("publish", lost) and journal_files(work) == []


def test_a_live_agent_sends_again_the_final_report_it_kept(tmp_path):
    """j1's SUCCEEDED was not sent within its budget (Pub/Sub down, or one publish refused): it stayed in the
    journal for the next agent alone, while this one went on running jobs with Pub/Sub back, and Zen, hearing
    nothing, took the attempt for lost and ran a job that had ended again."""
    work = tmp_path / "work"
    transport = Recording(VM, work=work)
    transport.add_start(start_message("j1"))
    transport.add_start(start_message("j2"))
    transport.answer = confirm_claims(VM)
    publish = transport.publish

    def failing_j1s_first_final(message, *, budget_s, **abandon):
        transport.fail_final = isinstance(message, Heartbeat) and message.job_id == "j1" and not transport.fail_once
        transport.fail_once = transport.fail_once or transport.fail_final and message.status is AgentStatus.SUCCEEDED
        return publish(message, budget_s=budget_s)

    transport.fail_once = False
    transport.publish = failing_j1s_first_final
    agent = agent_on(transport)
    idle = transport.when_idle
    transport.when_idle = lambda: transport.clock() > 120 and idle()  # idle a while: the resend is due
    assert agent.run() == 0

    finals = [m for kind, *rest in transport.events if kind == "publish" for m in rest
              if isinstance(m, Heartbeat) and m.status is AgentStatus.SUCCEEDED]
    assert sorted(m.job_id for m in finals) == ["j1", "j2"]
    assert journal_files(work) == []
