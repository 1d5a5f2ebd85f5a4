"""A VM whose own token Secret Manager refuses (401 UNAUTHENTICATED, every read: its service account's credentials
broken) gives each attempt back (PREEMPTED: requeued without spending an attempt, the VM's fault), and after
``MAX_VM_FAULTS`` such attempts in a row it retires, as after stagings its disk failed (one rule: attempts given
back for the VM's own fault). It never retired: it went on claiming job after job, spending each one's free
preemptions (FREE_PREEMPTIONS) until every job with a secret had failed on it. A secret refused for the job's own
reference (PERMISSION_DENIED, NOT_FOUND: FAILED) neither counts nor resets them; an attempt that starts resets them.
Cloud Storage refusing the VM's token (401) while staging counts the same, in the same row. The agent loop with the
fake Pub/Sub of the other agent tests, the official clients against the Secret Manager and Cloud Storage stand-ins."""

from __future__ import annotations

import grpc
from google.api_core import exceptions as gexc

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, start_message
from tests.agent.test_staging import client  # noqa: F401 (fixture)
from tests.agent.test_staging_faults import WORDS, retiring_agent
from zen.adapters.secret_manager import secret_client, secret_reader
from zen.agent import secrets
from zen.agent.staging import AttemptData
from zen.core.models import InputSpec
from zen_dev.local.secret_manager import SecretManagerStandIn, SecretStore

REFUSED = "projects/my-project/secrets/hf-token/versions/1"  # readable, but the VM's token is refused
DENIED = "projects/my-project/secrets/db-password/versions/1"  # not granted to the VM's service account
MISSING = "projects/my-project/secrets/hf-gone/versions/1"  # granted, no such secret


def test_a_vm_whose_token_is_refused_three_attempts_in_a_row_retires(tmp_path, monkeypatch):
    monkeypatch.setattr(secrets, "RETRY_DELAYS_S", (0.01,))  # tried twice, not for 15 s
    store = SecretStore({"projects/my-project/secrets/hf-token": "v", "projects/my-project/secrets/db-password": "w"},
                        granted=["projects/my-project/secrets/hf-*"])
    plan = [("r1", REFUSED, True), ("r2", REFUSED, True), ("den", DENIED, False), ("gone", MISSING, False),
            ("ok", REFUSED, False), ("r3", REFUSED, True), ("r4", REFUSED, True), ("r5", REFUSED, True),
            ("never", REFUSED, True)]
    transport = FakeTransport(VM, virtual_time=False)
    acks = [transport.add_start(start_message(job_id, secrets={"TOKEN": reference})) for job_id, reference, _ in plan]
    token_refused = dict((job_id, refused) for job_id, _, refused in plan)
    job: list[str] = []  # the attempt under way: whether its reads have the VM's token refused
    with SecretManagerStandIn(store) as standin:
        read = secret_reader(lambda location: secret_client(standin.endpoint, location))

        def read_secret(reference: str) -> bytes:
            if token_refused[job[0]]:  # every read of this attempt: a 401 from the service
                store.fail_next(grpc.StatusCode.UNAUTHENTICATED)
            return read(reference)

        agent = retiring_agent(tmp_path, transport, read_secret)
        original = agent.attempts.run

        def run(start, attempt, gpu_ids):
            job[:] = [start.job_id]
            return original(start, attempt, gpu_ids)

        monkeypatch.setattr(agent.attempts, "run", run)
        transport.when_idle = lambda: agent.request_shutdown("nothing left")
        assert agent.run() == 0

    ended = {job_id: status for job_id, _, status, _ in transport.job_reports() if status not in ("CLAIMED", "RUNNING")}
    assert ended == {"r1": "PREEMPTED", "r2": "PREEMPTED", "den": "FAILED", "gone": "FAILED", "ok": "SUCCEEDED",
                     "r3": "PREEMPTED", "r4": "PREEMPTED", "r5": "PREEMPTED"}, ended
    assert [start.ack_id for start in transport.starts] == [acks[-1]]  # never pulled: left for another VM
    assert agent.shutdown.reason == "deleted" and "RETIRED" in transport.vm_states()
    assert agent.pulls.exhausted().startswith("3 attempts in a row given back for this VM's own fault (the last: its credentials, zen: "
                                              f"secret TOKEN: {REFUSED}: Secret Manager unavailable: ")


def test_stagings_and_secrets_refused_for_the_vms_token_count_in_one_row(client, tmp_path, monkeypatch):  # noqa: F811
    """Two stagings Cloud Storage refused the VM's token for, then a secret's read: retired. A missing input (the
    job's fault) between them neither counts nor resets them."""
    monkeypatch.setattr(secrets, "RETRY_DELAYS_S", (0.01,))
    download = AttemptData._download

    def refused(self, blob, target, disk):  # the VM's token, refused for every object but the sound job's
        if self.job_id != "ok":
            raise gexc.Unauthorized("Invalid Credentials")
        return download(self, blob, target, disk)

    monkeypatch.setattr(AttemptData, "_download", refused)
    store = SecretStore({"projects/my-project/secrets/hf-token": "v"})
    transport = FakeTransport(VM, virtual_time=False)
    starts = [start_message("s1", inputs=WORDS), start_message("ok", inputs=WORDS), start_message("s2", inputs=WORDS),
              start_message("miss", inputs=[InputSpec(uri="gs://data-bkt/nothing/here")]),
              start_message("s3", inputs=WORDS), start_message("r1", secrets={"TOKEN": REFUSED}),
              start_message("never", inputs=WORDS)]
    acks = [transport.add_start(start) for start in starts]
    with SecretManagerStandIn(store) as standin:
        read = secret_reader(lambda location: secret_client(standin.endpoint, location))

        def read_secret(reference: str) -> bytes:
            store.fail_next(grpc.StatusCode.UNAUTHENTICATED)
            return read(reference)

        agent = retiring_agent(tmp_path, transport, read_secret)
        transport.when_idle = lambda: agent.request_shutdown("nothing left")
        assert agent.run() == 0

    ended = {job_id: status for job_id, _, status, _ in transport.job_reports() if status not in ("CLAIMED", "RUNNING")}
    assert ended == {"s1": "PREEMPTED", "ok": "SUCCEEDED", "s2": "PREEMPTED", "miss": "FAILED", "s3": "PREEMPTED",
                     "r1": "PREEMPTED"}, ended
    assert [start.ack_id for start in transport.starts] == [acks[-1]]
    assert agent.pulls.exhausted().startswith("3 attempts in a row given back for this VM's own fault (the last: its credentials, zen: "
                                              f"secret TOKEN: {REFUSED}: Secret Manager unavailable: ")
