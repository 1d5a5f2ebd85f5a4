"""Property: whatever order and however many times Pub/Sub delivers a job's heartbeats, the job
ends in the same state as when they arrive once, in order."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.messages import agent_run, job_request
from zen.store import repository

_jobs = itertools.count()

FINAL = st.sampled_from([("SUCCEEDED", 0), ("FAILED", 2), ("STOPPED", -15)])


def final_state(zen, job_id):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.status, job.attempt, job.vm, job.exit_code, job.message


def deliveries(draw, beats):
    """A random interleaving of ``beats`` in which each is delivered 1-3 times."""
    copies = [beat for beat in beats for _ in range(draw(st.integers(1, 3)))]
    return draw(st.permutations(copies))


def claim_first(batch, run):
    """``batch`` with a copy of ``run``'s CLAIMED moved before its first message of ``run``: an agent sends its
    attempt's later reports after Zen's CONFIRM, which answers a CLAIMED Zen has read, so no other report of the
    attempt is read before one of its CLAIMEDs (a PREEMPTED read first is a claim given up: ``left_vms``)."""
    mine = [i for i, beat in enumerate(batch) if beat in run]
    claim = next(i for i in mine if batch[i]["status"] == "CLAIMED")
    beat = batch.pop(claim)
    batch.insert(mine[0], beat)
    return batch


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), final=FINAL, preempted_first=st.booleans(), running_beats=st.integers(0, 3))
def test_any_interleaving_and_duplication_ends_like_the_clean_order(functions, zen, data, final, preempted_first,
                                                                     running_beats):
    n = next(_jobs)
    clean, messy = f"clean-{n}", f"messy-{n}"
    status, exit_code = final

    def attempts(job_id):
        runs = []
        attempt = 1
        if preempted_first:  # attempt 1 is preempted, attempt 2 finishes
            runs.append(agent_run(job_id, attempt=1, vm="vm-a", final="PREEMPTED", running_beats=running_beats))
            attempt = 2
        runs.append(agent_run(job_id, attempt=attempt, vm="vm-b", final=status, exit_code=exit_code,
                              running_beats=running_beats))
        return runs

    for job_id in (clean, messy):
        functions.submit(job_request(job_id))
    for run in attempts(clean):
        for beat in run:
            functions.heartbeat(beat)

    # Messy: an attempt's messages can only be sent once that attempt exists (the previous one was
    # requeued), but within an attempt, and for late copies of older attempts, anything goes.
    delivered = []
    for run in attempts(messy):
        stragglers = data.draw(st.lists(st.sampled_from(delivered), max_size=3)) if delivered else []
        batch = claim_first(data.draw(st.permutations(deliveries(data.draw, run) + stragglers)), run)
        # The attempt's final report must come after everything else of a *previous* attempt was
        # processed only in the clean run; here late copies of old attempts may trail behind.
        for beat in batch:
            functions.heartbeat(beat)
        delivered += run

    assert final_state(zen, messy) == final_state(zen, clean)
