"""``zen submit --wait`` follows what it published (``zen.follow``): the job of that request, the refusal
of that message, not just anything carrying the job_id."""

from __future__ import annotations

import io

from tests.messages import agent_run, job_request
from zen.follow import JobStatusSource, follow
from zen.models import JobRequest, request_fingerprint


class NoOutput:
    def new_entries(self, job_id, attempt=None):
        return []


def _published(payload: dict) -> str:
    request = JobRequest.model_validate(payload)
    return request_fingerprint(request.canonical(request.job_id))


def _follow(zen, job_id: str, message_id: str, request_hash: str, err: io.StringIO) -> int:
    return follow(job_id, NoOutput(), JobStatusSource(zen.db), out=io.StringIO(), err=err, poll_s=0.01,
                  settle_s=0.0, appear_timeout_s=2.0, message_id=message_id, request_hash=request_hash)


def test_a_reused_id_is_reported_refused_not_as_the_other_users_job(functions, zen):
    functions.submit(job_request("shared-id", user_id="alice"))
    for beat in agent_run("shared-id", final="SUCCEEDED"):
        functions.heartbeat(beat)
    bobs = job_request("shared-id", user_id="bob", command=["python", "bob.py"])
    functions.submit(bobs, message_id="m-bob")
    err = io.StringIO()
    assert _follow(zen, "shared-id", "m-bob", _published(bobs), err) == 1
    assert "was refused: job_id shared-id is already used by a different request" in err.getvalue()
    assert "SUCCEEDED" not in err.getvalue()  # alice's job is not shown as bob's


def test_an_earlier_refusal_of_the_same_id_does_not_end_the_fixed_submission(functions, zen):
    functions.submit(job_request("fixme", regions=["mars-north1"]), message_id="m-1")  # refused: bad region
    fixed = job_request("fixme")
    err = io.StringIO()
    # `zen submit --wait` of the fixed file polls before the function has its message: the old
    # refusal is not this message's, so it waits for the job (here: gives up after 2 s, exit 1)
    assert _follow(zen, "fixme", "m-2", _published(fixed), err) == 1
    assert "was refused" not in err.getvalue() and "no job fixme after" in err.getvalue()
    functions.submit(fixed, message_id="m-2")
    for beat in agent_run("fixme", final="SUCCEEDED"):
        functions.heartbeat(beat)
    err = io.StringIO()
    assert _follow(zen, "fixme", "m-2", _published(fixed), err) == 0
    assert "fixme SUCCEEDED" in err.getvalue()


def test_the_same_request_sent_again_follows_the_job_it_duplicates(functions, zen):
    request = job_request("again")
    functions.submit(request, message_id="m-a")
    functions.submit(request, message_id="m-b")  # a duplicate: the same job
    for beat in agent_run("again", final="SUCCEEDED"):
        functions.heartbeat(beat)
    assert _follow(zen, "again", "m-b", _published(request), io.StringIO()) == 0
