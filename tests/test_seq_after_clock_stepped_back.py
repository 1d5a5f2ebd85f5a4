"""A report's ``seq`` is the VM's wall clock in epoch milliseconds (``zen.agent.reports``), and Zen applies only a
report above the attempt's last one. An agent that died while its job ran, restarted by systemd after the VM's clock
was stepped back (chrony correcting a clock that ran ahead, the guest agent setting it after a host event), drew its
seqs from a clock below the dead agent's: its PREEMPTED for the attempt was taken for one seen already and dropped,
and the job waited ``heartbeat_timeout_s`` for the lost-job sweep, which spent one of its attempts (the last one:
the job FAILED, "lost"). The agent's Reporter with its journal, its wall clock set back as the VM's was; Zen's
functions through functions-framework against a real Postgres."""

from __future__ import annotations

import json

from tests.messages import job_request
from zen.agent.identity import Identity
from zen.agent.journal import Journal
from zen.agent.reports import AttemptReport, Reporter
from zen.core.models import AgentStatus, Heartbeat
from zen.store import repository

VM = Identity(project="p", vm="vm-a", cluster="4xa100-40gb", region="us-central1", zone="us-central1-a",
              from_environment=True)


def agent_reporter(work, sent: list[Heartbeat], wall_clock: float) -> Reporter:
    """An agent's Reporter as ``zen.agent.agent`` builds it (its journal in the work directory), its clock fixed."""
    return Reporter(VM, lambda message, budget_s, **abandon: sent.append(message), wall_clock=lambda: wall_clock,
                    journal=Journal(work, VM.vm, wall_clock=lambda: wall_clock))


def test_an_agent_restarted_after_the_vms_clock_stepped_back_still_gets_its_report_applied(
        functions, zen, clock, tmp_path):
    functions.submit(job_request("job-1"))
    sent: list[Heartbeat] = []
    now = clock().timestamp()
    dead = agent_reporter(tmp_path, sent, now)
    attempt = AttemptReport("job-1", 1)
    dead.job(attempt, AgentStatus.CLAIMED, budget_s=1)
    dead.job(attempt, AgentStatus.RUNNING, budget_s=1)

    clock.advance(5)  # the agent is killed; systemd restarts it, the VM's clock stepped back 30 s meanwhile
    restarted = agent_reporter(tmp_path, sent, now + 5 - 30)
    restarted.job(attempt, AgentStatus.PREEMPTED, budget_s=1, message="zen: the agent on VM vm-a died")
    for report in sent:
        functions.heartbeat(json.loads(report.to_bytes()))

    with zen.db.transaction() as session:
        job = repository.get_job(session, "job-1")
    assert (job.status.value, job.attempt) == ("QUEUED", 2), (job.status.value, job.attempt, [r.seq for r in sent])


def test_a_floor_past_what_zen_takes_is_not_counted_above(tmp_path):
    """A dead agent whose clock ran far ahead (its reports refused: more than SEQ_AHEAD_S ahead of Zen's clock) left a
    floor the restarted agent, its clock right again, does not count above: every report of its would be refused."""
    sent: list[Heartbeat] = []
    now = 1_767_225_600.0
    agent_reporter(tmp_path, sent, now + 3600).job(AttemptReport("job-1", 1), AgentStatus.RUNNING, budget_s=1)
    agent_reporter(tmp_path, sent, now).job(AttemptReport("job-1", 1), AgentStatus.PREEMPTED, budget_s=1)
    assert sent[-1].seq == int(now * 1000), [r.seq for r in sent]
