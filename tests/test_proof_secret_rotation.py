"""The MAC secret's rotation as docs/reference/messages.md (Heartbeat) and terraform/proof_secret.tf tell it:
set ZEN_PROOF_SECRET to "<new>,<old>", redeploy, and a day later set it to "<new>" alone.

An agent learns its MAC key only from the CONFIRM of a claim. An agent running one job (jobs may run 7 days)
claims nothing meanwhile: a day after the rotation it still MACed under the old secret, every heartbeat of that
running job was then refused ("vm_mac is not the MAC ...") and the sweep took the healthy job for lost and ran
it again. An agent signs once its MAC key is ``MAC_KEY_TTL_S`` old (zen.adapters.message_key)."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_vm_proof_functions import VM_A, confirm_of, proof
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.adapters.message_key import MAC_ATTRIBUTE, SEALED_KEY_ATTRIBUTE, MessageKey

OLD, NEW = "o" * 40, "n" * 40


def deployed(config, db, publisher, clock, monkeypatch, secret: str):
    """Zen's functions as deployed with ZEN_PROOF_SECRET=``secret`` (a redeploy builds a new Zen)."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_PROOF_SECRET", secret)
    zen = Zen(config, db, publisher, clock)
    return zen, FunctionsInvoker(zen)


@pytest.fixture
def env(certs, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)


def test_a_job_running_through_the_documented_rotation_keeps_its_heartbeats(env, config, db, publisher, clock,
                                                                            issuer, project, monkeypatch):
    zen, functions = deployed(config, db, publisher, clock, monkeypatch, OLD)
    key = MessageKey(clock=lambda: clock().timestamp())
    agent = proof(issuer, clock, project, VM_A, key=key)
    functions.submit(job_request("long-train"))
    start = ms(clock)
    functions.heartbeat(**agent(heartbeat("long-train", "CLAIMED", start, vm=VM_A)))
    assert key.learn(confirm_of(publisher, VM_A, "long-train").attributes[SEALED_KEY_ATTRIBUTE])
    functions.heartbeat(**agent(heartbeat("long-train", "RUNNING", start + 1, vm=VM_A)))
    assert job(zen, "long-train").status.value == "RUNNING"
    zen.relay.marks.flush()

    # Rotation, step 1: "<new>,<old>", redeployed. The agent runs on, heartbeating every hour for a day
    # (a fresh token each hour, the same message key); each heartbeat is taken, MACed then signed.
    zen, functions = deployed(config, db, publisher, clock, monkeypatch, f"{NEW},{OLD}")
    for hour in range(25):
        clock.advance(3600)
        agent = proof(issuer, clock, project, VM_A, key=key)
        beat = agent(heartbeat("long-train", "RUNNING", ms(clock), vm=VM_A))
        assert (MAC_ATTRIBUTE in beat["attributes"]) is (hour < 12)  # signed once the key is 12 h old
        functions.heartbeat(**beat)
    assert rejections(zen) == []
    zen.relay.marks.flush()

    # Step 2, a day later: "<new>" alone. The agent, still running
    # the job, heartbeats every 30 s as before: Pub/Sub takes each (its fence never falls, zen.agent.fence).
    zen, functions = deployed(config, db, publisher, clock, monkeypatch, NEW)
    agent = proof(issuer, clock, project, VM_A, key=key)
    for _ in range(6):
        clock.advance(30)
        functions.heartbeat(**agent(heartbeat("long-train", "RUNNING", ms(clock), vm=VM_A)))
    zen.jobs.sweeps.sweep_lost()
    after = job(zen, "long-train")
    zen.relay.marks.flush()
    assert (after.status.value, after.attempt) == ("RUNNING", 1), (
        f"the job, running on {VM_A} all along, was taken for lost: {after.status.value} attempt {after.attempt}; "
        f"its heartbeats were refused: {rejections(zen)[:1]}")
