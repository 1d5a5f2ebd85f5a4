"""The heartbeat path's probe (``zen.jobs.probes``) was heard before the VM proof was checked. While the proof
check failed transiently (Google's certificate URL unreachable once the certificates' cache had run out:
``TransientError``, the function answers 500, Pub/Sub backs off and holds every report), the probes still came
through, so the sweep counted the attempt's silence to now and took a healthy, running attempt for lost (STOP to
its VM, a second attempt queued) while the agent's fence, renewed by every report Pub/Sub accepted, was up. A
probe is held back now as the reports are (``ProofChecker.ready``).

Through the functions (functions-framework, CloudEvent envelopes), real Postgres, the Pub/Sub stand-in, and
the test issuer's certificates served over HTTP, as in tests/test_vm_proof_functions.py."""

from __future__ import annotations

import functools
import json
import secrets

import pytest

from tests.messages import heartbeat, job_request
from tests.test_heartbeat_seq import ms
from tests.token_support import CertsServer, issuer  # noqa: F401  (fixture)
from zen.adapters.message_key import MessageKey, audience
from zen.agent.fence import fence_left
from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings, with_deadlines
from zen.store import repository

KEY = functools.cache(MessageKey)  # made at its first use (RSA: 0.15 s), not at every worker's collection
VM_A = "zen-4xa100-40gb-us-central1-a0a0"


@pytest.fixture
def certs(issuer):  # noqa: F811
    # The certificates' cache runs out at once (max-age 0): each verification of a token not yet remembered
    # fetches them, as one does once their max-age has passed (Google's: hours).
    server = CertsServer.of(issuer, max_age_s=0)
    yield server
    server.close()


@pytest.fixture
def zen(config, db, publisher, clock, certs, monkeypatch):
    from zen.app import Zen

    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    monkeypatch.setenv("ZEN_PROOF_SECRET", secrets.token_urlsafe(32))
    zen = Zen(config, db, publisher, clock)
    yield zen
    zen.relay.marks.flush()


def signed(issuer, clock, project, payload):  # noqa: F811
    """VM_A's agent's message, with a token it fetched now (agents fetch a new one every ~55 minutes)."""
    token = issuer.token(vm=VM_A, zone="us-central1-a", project=project,
                         audience=audience(project, KEY().fingerprint), now=clock().timestamp())
    data = json.dumps(payload).encode()
    return {"payload": data, "attributes": KEY().attributes(token, data, {})}


def status(zen, job_id="job-1"):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.status.value, job.attempt


def test_a_running_attempt_is_not_taken_for_lost_while_its_reports_fail_the_proof_check_transiently(
        functions, zen, publisher, clock, issuer, certs, project):  # noqa: F811
    settings = with_deadlines(AgentSettings(), zen.config.deadlines, {})
    t0 = clock().timestamp()
    seen = 0

    def tick_and_deliver_probes() -> list[int]:
        """The tick's probes delivered as Pub/Sub would: their answers (a 500 is redelivered later)."""
        nonlocal seen
        functions.tick()
        new = publisher.on("zen-heartbeats")[seen:]
        seen += len(new)
        return [functions.send("on_heartbeat", payload=m.data).status_code for m in new
                if json.loads(m.data).get("kind") == "probe"]

    functions.submit(job_request("job-1"))
    start = ms(clock)
    functions.heartbeat(**signed(issuer, clock, project, heartbeat("job-1", "CLAIMED", start, vm=VM_A)))
    functions.heartbeat(**signed(issuer, clock, project, heartbeat("job-1", "RUNNING", start + 1, vm=VM_A)))
    attempt = AttemptReport("job-1", 1, accepted_at=clock().timestamp() - t0)
    assert status(zen) == ("RUNNING", 1)
    assert set(tick_and_deliver_probes()) == {200}

    certs.close()  # Google's certificate URL cannot be reached from the heartbeat function for a few minutes
    seq = start + 2
    for _ in range(8):  # 4 minutes: a tick every 30 s, vm-a reporting every 30 s
        clock.advance(30)
        seq += 30_000
        answer = functions.send("on_heartbeat",
                                **signed(issuer, clock, project, heartbeat("job-1", "RUNNING", seq, vm=VM_A)))
        assert answer.status_code == 500  # TransientError: Pub/Sub keeps the report and redelivers it later...
        attempt.accepted_at = clock().timestamp() - t0  # ...having accepted it: the agent's fence is renewed
        assert set(tick_and_deliver_probes()) <= {500}  # held back as the reports are
        assert fence_left(attempt, settings, clock().timestamp() - t0) > 0  # vm-a's job still runs
        assert status(zen) == ("RUNNING", 1), (
            "a healthy attempt was taken for lost (STOP sent, attempt 2 queued) while its reports waited in "
            "Pub/Sub's backoff behind a transient proof failure, because the path's probes skip the proof check")
