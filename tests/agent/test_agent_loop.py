"""The agent loop against a fake transport: the claim protocol's edges, bad messages, Pub/Sub
errors. The real runner runs the (tiny) jobs; claim timeouts run on a manual clock."""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import replace

import pytest

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import job_command
from zen.agent.agent import Agent
from zen.agent.identity import Identity
from zen.agent.settings import AgentSettings
from zen.agent.transport import StartDelivery
from zen.core.models import ControlAction, Heartbeat, StartMessage

VM = "vm-test"
IDENTITY = Identity(project="p", vm=VM, cluster="4xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
SETTINGS = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3, lease_s=10,
                         vm_heartbeat_s=1000)


def start_message(job_id="j1", attempt=1, **fields) -> StartMessage:
    values = {"job_id": job_id, "attempt": attempt, "cluster": "4xa100-40gb", "user_id": "alice",
              "command": job_command("--print", f"hello {job_id}"), "regions": ["us-central1"], **fields}
    return StartMessage(**values)


def reports(transport: FakeTransport) -> list[tuple[str, int, str]]:
    """The job reports sent, checking their ``seq``: epoch milliseconds, strictly increasing."""
    seqs = [r[3] for r in transport.job_reports()]
    assert all(seq > 1_600_000_000_000 for seq in seqs) and seqs == sorted(set(seqs)), seqs
    return [r[:3] for r in transport.job_reports()]


def make_agent(transport: FakeTransport, settings: AgentSettings = SETTINGS, read_secret=None) -> Agent:
    agent = Agent(IDENTITY, settings, transport, local=True, clock=transport.clock, read_secret=read_secret)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    return agent


@pytest.fixture
def transport():
    return FakeTransport(VM)


@pytest.fixture
def real_time_transport():
    return FakeTransport(VM, virtual_time=False)


def test_an_unanswered_claim_is_resent_with_the_next_seq_kept_leased_then_given_back(transport):
    ack_id = transport.add_start(start_message())
    agent = make_agent(transport)

    assert agent.run() == 0

    assert reports(transport) == [("j1", 1, "CLAIMED")] * 3
    extends = [call for call in transport.calls if call[0] == "extend"]
    # On receipt, then every lease_s / 3 (10 s) over the 3 x 5 s of waiting.
    assert len(extends) == 5 and all(call == ("extend", ack_id, 10) for call in extends)
    assert transport.calls[-1] == ("nack", ack_id) and ("ack", ack_id) not in transport.calls
    assert agent.jobs_run == 0 and transport.closed_with == {}
    # Its claim may have won meanwhile: a VM heartbeat says at once that it gave the start back.
    assert transport.vm_states() == ["IDLE", "IDLE", "STOPPING"]


def test_a_start_that_comes_back_is_claimed_after_every_earlier_report_of_its_attempt_and_runs(real_time_transport):
    """The answers to the first claim come too late (the agent has given the start back); the start
    comes back to this VM. Zen drops a report at or below the last seq it applied for the attempt, so
    the second claim's reports must go on after the first claim's: a seq starting again at 1 went
    unanswered, and the start was given back again and again."""
    transport = real_time_transport
    first, again = transport.add_start(start_message()), transport.add_start(start_message())
    applied: list[int] = []

    def zen(message):  # the first claim's CONFIRMs arrive after the agent gave up: none reaches it
        if not isinstance(message, Heartbeat) or (applied and message.seq <= applied[-1]):
            return []  # a duplicate, for Zen
        applied.append(message.seq)
        return confirm_claims(VM)(message) if len(applied) > SETTINGS.claim_tries else []

    transport.answer = zen
    agent = make_agent(transport, replace(SETTINGS, claim_timeout_s=0.2))

    assert agent.run() == 0 and agent.jobs_run == 1
    assert ("nack", first) in transport.calls and ("ack", again) in transport.calls
    statuses = [r[2] for r in reports(transport)]  # every seq above the one before
    assert statuses[:4] == ["CLAIMED"] * 4 and statuses[-1] == "SUCCEEDED"
    assert len(applied) == len(statuses)  # Zen applied every report


def test_release_drops_the_start_message_and_the_agent_pulls_again(real_time_transport):
    transport = real_time_transport
    first, second = transport.add_start(start_message("lost-race")), transport.add_start(start_message("next"))
    transport.answer = lambda message: (
        [] if message.kind != "job" or message.status.value != "CLAIMED" else
        confirm_claims(VM)(message) if message.job_id == "next" else [])
    transport.order("lost-race", 1, ControlAction.RELEASE, "claimed by vm-other")
    agent = make_agent(transport)

    agent.run()

    assert ("ack", first) in transport.calls and ("ack", second) in transport.calls
    assert [r for r in reports(transport) if r[0] == "lost-race"] == [("lost-race", 1, "CLAIMED")]
    # The statuses in order (a slow machine may add a periodic RUNNING while the job runs).
    assert [status for status, _ in itertools.groupby(r[2] for r in transport.job_reports() if r[0] == "next")] == [
        "CLAIMED", "RUNNING", "SUCCEEDED"]


def test_a_stop_while_claiming_drops_the_message_and_answers_stopped(transport):
    ack_id = transport.add_start(start_message())
    transport.order("j1", 1, ControlAction.STOP, "user stop")
    make_agent(transport).run()

    assert ("ack", ack_id) in transport.calls
    assert reports(transport) == [("j1", 1, "CLAIMED"), ("j1", 1, "STOPPED")]


def test_orders_about_other_attempts_are_acked_and_ignored(real_time_transport):
    transport = real_time_transport
    transport.add_start(start_message("j1", attempt=2))
    transport.order("j1", 1, ControlAction.STOP, "stale attempt")  # the previous attempt
    transport.order("other", 1, ControlAction.CONFIRM)
    transport.answer = confirm_claims(VM)
    make_agent(transport).run()

    assert ("control_ack", "j1", "STOP") in transport.calls and ("control_ack", "other", "CONFIRM") in transport.calls
    sent = reports(transport)
    assert sent[0] == ("j1", 2, "CLAIMED") and sent[-1][2] == "SUCCEEDED"


def test_a_start_message_that_fails_validation_is_acked_and_never_claimed(transport):
    broken = transport.add_start(b'{"job_id": "j1", "comand": ["oops"]}')
    make_agent(transport).run()

    assert transport.calls[-1] == ("ack", broken) and transport.job_reports() == []


@pytest.mark.parametrize("fields", [{"attempt": 0}, {"attempt": 2**40}, {"job_id": "not a job id"}])
def test_a_start_no_heartbeat_could_name_is_acked_as_invalid_and_never_claimed(transport, fields, caplog):
    """Such a start once decoded, failed its first CLAIMED, and was given back: start subscriptions have
    no dead letter, so it came back to every VM of its region, forever."""
    body = {**start_message().model_dump(mode="json", exclude_none=True), **fields}
    broken = transport.add_start(json.dumps(body).encode())
    make_agent(transport).run()

    assert ("ack", broken) in transport.calls and ("nack", broken) not in transport.calls
    assert transport.job_reports() == []
    assert [r.reason for r in caplog.records if r.getMessage() == "invalid start message dropped"]


def test_a_claim_no_report_can_name_is_acked_but_one_this_vm_cannot_sign_is_given_back(transport):
    """The net behind StartMessage's bounds: a start whose CLAIMED cannot be built for its job id or
    attempt is acked (no VM could claim it); one that fails for this VM's own identity is given back."""
    unnamable = StartMessage.model_construct(**{**dict(start_message()), "job_id": "bad id"})
    agent = make_agent(transport)
    agent._hold(StartDelivery("ack-x", "x", b"", {}, 1), unnamable, ())
    bad_vm = Agent(replace(IDENTITY, vm="v" * 200), SETTINGS, transport, local=True, clock=transport.clock)
    bad_vm._hold(StartDelivery("ack-y", "y", b"", {}, 1), start_message(), ())

    assert ("ack", "ack-x") in transport.calls and ("nack", "ack-x") not in transport.calls
    assert ("nack", "ack-y") in transport.calls and ("ack", "ack-y") not in transport.calls
    assert transport.job_reports() == []


@pytest.mark.parametrize("fields", [{"cluster": "8xa100-40gb"}, {"regions": ["europe-west4"]}])
def test_a_start_message_for_another_cluster_or_region_is_given_back(transport, fields):
    ack_id = transport.add_start(start_message(**fields))
    make_agent(transport).run()

    assert transport.calls[-1] == ("nack", ack_id) and transport.job_reports() == []


def test_shutdown_while_claiming_gives_the_message_back_and_reports_preempted(transport):
    ack_id = transport.add_start(start_message())
    agent = make_agent(transport)
    transport.answer = lambda message: (getattr(message, "status", None) and agent.request_shutdown("SIGTERM")) or []

    agent.run()

    assert ("nack", ack_id) in transport.calls
    assert reports(transport) == [("j1", 1, "CLAIMED"), ("j1", 1, "PREEMPTED")]


def test_pubsub_errors_do_not_end_the_loop(real_time_transport):
    transport = real_time_transport
    transport.fail_pull = 2
    transport.fail_publish = 1  # the first IDLE report is lost; the agent goes on
    transport.add_start(start_message())
    transport.answer = confirm_claims(VM)
    agent = make_agent(transport)

    assert agent.run() == 0
    assert [r[2] for r in transport.job_reports()][-1] == "SUCCEEDED" and agent.jobs_run == 1


def test_a_job_that_cannot_run_here_fails_with_the_reason(real_time_transport):
    transport = real_time_transport
    transport.add_start(start_message(command=None, image="us-docker.pkg.dev/p/r/train:1"))
    transport.answer = confirm_claims(VM)
    make_agent(transport).run()

    [failed] = [m for m in transport.published if getattr(m, "status", None) and m.status.value == "FAILED"]
    assert (failed.status.value, failed.exit_code) == ("FAILED", 127)
    assert "local mode runs no containers" in failed.message
    assert transport.vm_states() == ["IDLE", "BUSY", "IDLE", "STOPPING"]


def test_running_heartbeats_keep_coming_while_the_job_runs(real_time_transport):
    transport = real_time_transport
    transport.add_start(start_message(command=job_command("--sleep", "1.1")))
    transport.answer = confirm_claims(VM)
    make_agent(transport).run()

    statuses = [r[2] for r in transport.job_reports()]
    assert statuses[0] == "CLAIMED" and statuses[-1] == "SUCCEEDED" and statuses.count("RUNNING") >= 4


def test_binary_output_still_makes_a_valid_final_report(real_time_transport):
    transport = real_time_transport
    noisy = [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'y' * 9000 + b'\\x00\\xff\\xfe end')"]
    transport.add_start(start_message(command=noisy))
    transport.answer = confirm_claims(VM)
    make_agent(transport).run()

    [final] = [m for m in transport.published if getattr(m, "status", None) and m.status.value == "SUCCEEDED"]
    assert "\x00" not in final.message and final.message.endswith("\ufffd\ufffd\ufffd end")
    assert final.message.startswith("y") and len(final.message) <= 4096
