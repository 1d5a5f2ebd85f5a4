"""Whose fault a staging failure is (zen.agent.staging.Unavailable, zen.agent.transfer.transfer): the job's
(no such input, access denied, a bad name, inputs larger than the VM's disk) stays FAILED, final; the
VM's or the service's (its disk full or failing, the network, Cloud Storage's 5xx after the client's
retries, its credentials, an object replaced while staged) is reported PREEMPTED, which Zen requeues
without spending an attempt. Every staging error was FAILED: a full disk or an outage ended jobs for good."""

from __future__ import annotations

import errno
import sys

import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.exceptions import RefreshError

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_staging import attempt_data, client, run_one  # noqa: F401 (fixture)
from zen.agent import staging
from zen.agent.limits import DailyPulls, PullLimits
from zen.agent.settings import AgentSettings
from zen.agent.staging import AttemptData
from zen.core.models import Heartbeat, InputSpec, VmState


class FailingClient:
    """A Cloud Storage client whose every call fails with ``error``."""

    def __init__(self, error: BaseException):
        self.error = error

    def bucket(self, name):
        return self

    def get_blob(self, path):
        raise self.error

    def list_blobs(self, bucket, prefix=""):
        raise self.error


@pytest.mark.parametrize("error, vms", [
    (gexc.ServiceUnavailable("backend down"), True),
    (gexc.InternalServerError("oops"), True),
    (gexc.TooManyRequests("slow down"), True),
    (gexc.Unauthorized("the VM's token was refused"), True),
    (gexc.RetryError("Timeout of 120.0s exceeded", cause=None), True),
    (requests.exceptions.ConnectionError("connection refused"), True),
    (RefreshError("metadata server unreachable"), True),
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EIO, "Input/output error"), True),
    (gexc.NotFound("The specified bucket does not exist"), False),
    (gexc.Forbidden("agents@ does not have storage.objects.list access"), False),
    (gexc.BadRequest("Invalid object name"), False),
    (OSError(errno.ENAMETOOLONG, "File name too long"), False),
    (ValueError("something else"), False),
])
def test_an_error_is_the_vms_or_the_services_or_else_the_jobs(tmp_path, error, vms):
    data = AttemptData("j1", 1, [InputSpec(uri="gs://data-bkt/x/")], None, tmp_path / "work",
                       client_factory=lambda: FailingClient(error))
    data.prepare()

    with pytest.raises(staging.TransferError) as raised:
        data.stage()

    assert type(raised.value).__name__ == ("Unavailable" if vms else "TransferError")
    assert str(raised.value).startswith("input gs://data-bkt/x/: ")


def test_a_full_disk_while_staging_is_reported_preempted_not_failed(client, tmp_path, monkeypatch):  # noqa: F811
    marker = tmp_path / "ran"

    def full(self, blob, target):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(AttemptData, "_fetch", full)
    reports = run_one(tmp_path, start_message("disk-1", command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                                              inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")]))

    final = reports[-1]
    assert final.status.value == "PREEMPTED" and final.exit_code is None
    assert final.message.startswith(f"zen: VM {VM} could not stage the job's inputs (requeued): input "
                                    "gs://data-bkt/corpus/words.txt: [Errno 28] No space left on device")
    assert not marker.exists()
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [".cache", ".reports"]  # .reports: emptied


def test_an_object_replaced_while_it_is_staged_is_the_services_fault(client, tmp_path, monkeypatch):  # noqa: F811
    """Its listed generation is gone (Cloud Storage answers 404, as the stand-in now does): run again, the
    attempt stages the new one (or fails for a missing input if it was deleted)."""
    fetch = AttemptData._fetch

    def replaced_first(self, blob, target):
        client.bucket("data-bkt").blob(blob.name).upload_from_string(b"rewritten\n")
        return fetch(self, blob, target)

    monkeypatch.setattr(AttemptData, "_fetch", replaced_first)
    reports = run_one(tmp_path, start_message("gen-1", inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")]))

    final = reports[-1]
    assert final.status.value == "PREEMPTED"
    assert "input gs://data-bkt/corpus/words.txt: object corpus/words.txt changed while it was staged (generation " \
           in final.message and final.message.splitlines()[0].endswith(" is gone)")


def test_inputs_larger_than_the_whole_disk_are_the_jobs_fault(client, tmp_path, monkeypatch):  # noqa: F811
    usage = staging.shutil.disk_usage
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda path: usage(path)._replace(total=30))
    data = attempt_data(tmp_path, ["gs://data-bkt/corpus/words.txt", "gs://data-bkt/shards/"])

    with pytest.raises(staging.TransferError) as raised:
        data.stage()

    assert type(raised.value) is staging.TransferError
    assert str(raised.value) == ("input gs://data-bkt/shards/: the inputs need more than this VM's disk holds in all "
                                 "(30 B): 31 B up to shards/deep/part-1")
    assert data.staged.files == 1  # words.txt (11 B); shards/deep/part-1 (20 B) would pass the 30 B


def test_a_missing_bucket_stays_failed(client, tmp_path):  # noqa: F811
    reports = run_one(tmp_path, start_message("miss-1", inputs=[InputSpec(uri="gs://no-such-bkt/x")]))

    final = reports[-1]
    assert final.status.value == "FAILED"
    assert final.message.startswith("zen: input gs://no-such-bkt/x: 404 ")
    assert "The specified bucket does not exist: no-such-bkt" in final.message


def retiring_agent(tmp_path, transport, read_secret=None):
    """An agent that is shut down once it has said RETIRED (the VM is deleted), or when nothing is left; its
    secrets read by ``read_secret`` (None: Secret Manager's)."""
    agent = make_agent(transport, AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.02, claim_timeout_s=5,
                                                lease_s=10, vm_heartbeat_s=1000, work_dir=str(tmp_path / "work")),
                       read_secret=read_secret)
    confirm = confirm_claims(VM)

    def answer(message):
        if not isinstance(message, Heartbeat) and message.state is VmState.RETIRED:
            agent.request_shutdown("deleted")
        return confirm(message)

    transport.answer = answer
    return agent


def on_a_worn_disk(tmp_path, monkeypatch, starts, sound: str):
    """The agent of ``retiring_agent`` run over ``starts`` (start messages, in order) on a disk that fails every write
    of a staging but the job ``sound``'s; returns the agent, its transport, the starts' acks and each job's end."""
    broken = {"disk": True}
    download = AttemptData._download

    def worn(self, blob, target, disk):
        if broken["disk"]:  # a write to this VM's disk, from Cloud Storage or from the cache
            raise OSError(errno.EIO, "Input/output error", str(target))
        return download(self, blob, target, disk)

    monkeypatch.setattr(AttemptData, "_download", worn)
    transport = FakeTransport(VM, virtual_time=False)
    acks = [transport.add_start(start) for start in starts]
    agent = retiring_agent(tmp_path, transport)
    transport.when_idle = lambda: agent.request_shutdown("nothing left")
    original = agent.attempts.run

    def run(start, attempt, gpu_ids):
        broken["disk"] = start.job_id != sound
        return original(start, attempt, gpu_ids)

    monkeypatch.setattr(agent.attempts, "run", run)
    assert agent.run() == 0
    ended = {job_id: status for job_id, _, status, _ in transport.job_reports() if status not in ("CLAIMED", "RUNNING")}
    return agent, transport, acks, ended


WORDS = [InputSpec(uri="gs://data-bkt/corpus/words.txt")]


def test_a_vm_whose_disk_fails_three_stagings_in_a_row_retires(client, tmp_path, monkeypatch):  # noqa: F811
    """Each such attempt is PREEMPTED (requeued for free, up to FREE_PREEMPTIONS): one bad VM went on
    taking job after job and spending each one's free preemptions. A missing input (the job's fault)
    between two disk faults neither counts nor resets them; a staging that works resets them."""
    starts = [start_message(job_id, inputs=WORDS) for job_id in ("d1", "d2", "ok", "d3")]
    starts.append(start_message("miss", inputs=[InputSpec(uri="gs://data-bkt/nothing/here")]))
    starts += [start_message(job_id, inputs=WORDS) for job_id in ("d4", "d5", "never")]
    agent, transport, acks, ended = on_a_worn_disk(tmp_path, monkeypatch, starts, sound="ok")
    assert ended == {"d1": "PREEMPTED", "d2": "PREEMPTED", "ok": "SUCCEEDED", "d3": "PREEMPTED",
                     "miss": "FAILED", "d4": "PREEMPTED", "d5": "PREEMPTED"}
    assert [start.ack_id for start in transport.starts] == [acks[-1]]  # never pulled: left for another VM
    assert agent.shutdown.reason == "deleted" and "RETIRED" in transport.vm_states()
    assert agent.pulls.exhausted().startswith("3 attempts in a row given back for this VM's own fault (the last: its disk, input "
                                              "gs://data-bkt/corpus/words.txt: [Errno 5] Input/output error: ")


def test_cloud_storage_outages_do_not_retire_the_vm(tmp_path):
    pulls = DailyPulls(PullLimits(), gpus=1)
    data = AttemptData("j1", 1, [InputSpec(uri="gs://data-bkt/x/")], None, tmp_path / "work",
                       client_factory=lambda: FailingClient(gexc.ServiceUnavailable("backend down")))
    data.prepare()
    for _ in range(5):
        with pytest.raises(staging.Unavailable):
            data.stage()
        assert data.disk_fault is None
        pulls.staged(data.disk_fault)
    assert pulls.exhausted() is None
