"""A gang's first node, waiting for the others, repeats its claim (every ``claim_timeout_s``). A repeat that the
claim checks refused (``zen.jobs.claims``: a flex-start VM heard from for 10 minutes, a drain, a region no
longer cleared) was answered RELEASE while the node stayed in the gang: the agent let its part go, the gang
was completed and confirmed to that VM all the same, and only the other node ran: a job started a node short
(its rendezvous never complete; lost or failed). A node already in the gang is not checked again.

Through the real functions and two ``python -m zen.agent`` processes; the refusal here is a drain row written
for the first node's VM while it waits (the flex-start cause needs 10 minutes of its VM heard from)."""

from __future__ import annotations

import sys
import time

from tests.agent.helpers import wait_for
from zen.core.clock import utc_now

RANKS = "import os; print('node', os.environ['ZEN_NODE_RANK'], 'of', os.environ['ZEN_NUM_NODES'], flush=True)"


def test_a_waiting_gang_node_whose_repeated_claim_would_be_refused_still_runs_its_part(scheduler, agents):
    first = agents.start("vm-a")
    scheduler.submit("pair", [sys.executable, "-c", RANKS], nodes=2)
    wait_for(lambda: (job := scheduler.job("pair")) is not None and job.gang, 45, what="vm-a in the gang")
    claims = len(first.said("heartbeat sent", job_id="pair", status="CLAIMED"))
    with scheduler.db.transaction() as session:  # a refusal of its next claim: a drain, written directly
        session.sql("INSERT INTO vm_drains (name, cluster, region, at) VALUES ('vm-a', '4xa100-40gb', 'us-central1', "
                    ":now)", now=utc_now())
    # Two repeats of its claim (every half fence, 3.5 s, while the node waits), the first answered meanwhile; or its
    # part let go (a repeat refused: the assertions below say so).
    wait_for(lambda: len(first.said("heartbeat sent", job_id="pair", status="CLAIMED")) >= claims + 2
             or first.said("claim refused; start message dropped", job_id="pair"), 30,
             what="two repeats of vm-a's claim")
    second = agents.start("vm-b")
    job = scheduler.wait_status("pair", "SUCCEEDED", "FAILED", "LOST", timeout_s=60)
    ran = {agent.vm: [line for line in agent.logs() if line.get("job_id") == "pair"] for agent in (first, second)}
    assert job.status.value == "SUCCEEDED" and job.attempt == 1, (job.status, job.message, scheduler.history("pair"))
    assert first.said("job ended", job_id="pair") and second.said("job ended", job_id="pair"), ran


def test_a_gang_node_waiting_longer_than_its_fence_claims_again_in_time_and_runs_its_part(scheduler, agents):
    """A node's lease counts from the CLAIMED its CONFIRM answers; a waiting node claimed again only every
    ``claim_timeout_s``, so where that is above the fence (a short ``heartbeat_timeout_s``: here 20 s against 7 s), a
    gang completed after the fence had its first node read its CONFIRM past its lease: not run, PREEMPTED, the gang
    assembled again as attempt 2. It claims again within half the fence now."""
    first = agents.start("vm-a", ZEN_AGENT_CLAIM_TIMEOUT_S="20")
    scheduler.submit("pair", [sys.executable, "-c", RANKS], nodes=2)
    wait_for(lambda: (job := scheduler.job("pair")) is not None and job.gang, 45, what="vm-a in the gang")
    time.sleep(9)  # past the fence (7 s: heartbeat_timeout_s 10, less the stop grace and the margin)
    second = agents.start("vm-b", ZEN_AGENT_CLAIM_TIMEOUT_S="20")
    job = scheduler.wait_status("pair", "SUCCEEDED", "FAILED", "LOST", timeout_s=60)
    assert job.status.value == "SUCCEEDED" and job.attempt == 1, (job.status, job.message, scheduler.history("pair"))
    assert not first.said("claim confirmed after its lease ran out: not run"), first.logs()[-5:]
    assert first.said("job ended", job_id="pair") and second.said("job ended", job_id="pair")
