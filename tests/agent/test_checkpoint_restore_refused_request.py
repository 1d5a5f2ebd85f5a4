"""A checkpoint restore that Cloud Storage refuses for good with a 400 (the checkpoint's bucket made requester pays:
every read without a billing project is refused, on every VM) was ``Unavailable``: the attempt reported PREEMPTED,
requeued for free ``FREE_PREEMPTIONS`` times and then on spent attempts, a VM started for each, the refusal told
late. Only a 404 (the manifest replaced as it was read), 408, 429 and 5xx (after the client's retries) are Cloud
Storage's passing faults; a 400 fails the attempt at once, naming the bucket and Cloud Storage's reason. Inputs refused
so were the job's (FAILED) already, and stay so."""

from __future__ import annotations

import threading

import pytest
from google.cloud import storage as gcs

from tests.agent.test_agent_loop import make_agent
from tests.agent.test_checkpoint_link import PREFIX, rerun_reading_step
from tests.agent.test_upload_end import finals, settings
from zen.agent.staging import AttemptData, TransferError, Unavailable
from zen.core.models import AgentStatus, InputSpec

REQUESTER_PAYS = "Bucket is a requester pays bucket but no user project provided."


def test_a_restore_refused_by_a_requester_pays_bucket_fails_at_once_naming_it(storage, tmp_path):
    bucket = gcs.Client().create_bucket("ckpt-bkt")
    bucket.blob(PREFIX + "attempt-1/save-1/step").upload_from_string(b"step 1")
    bucket.blob(PREFIX + "LATEST.json").upload_from_string(
        '{"generation": "attempt-1/save-1/", "attempt": 1, "files": [{"path": "step", "size": 6}], "folders": []}')
    storage.state.deny(PREFIX, 400, REQUESTER_PAYS)
    transport = rerun_reading_step()
    make_agent(transport, settings(tmp_path)).run()
    final = finals(transport)["big"]
    assert final.status is AgentStatus.FAILED, (final.status, final.message)
    assert "gs://ckpt-bkt/" in final.message and REQUESTER_PAYS in final.message, final.message


@pytest.mark.parametrize("code", [400, 403])
def test_an_input_refused_for_good_is_the_jobs_failure(storage, tmp_path, code):
    gcs.Client().create_bucket("in-bkt").blob("data/a.bin").upload_from_string(b"a")
    storage.state.deny("data/", code, REQUESTER_PAYS if code == 400 else "no storage.objects.get access")
    data = AttemptData("j", 1, [InputSpec(uri="gs://in-bkt/data/a.bin")], None, tmp_path / "work",
                       cancel=threading.Event())
    data.prepare()
    with pytest.raises(TransferError, match=rf"input gs://in-bkt/data/a.bin: {code} ") as raised:
        data.stage()
    assert not isinstance(raised.value, Unavailable)
