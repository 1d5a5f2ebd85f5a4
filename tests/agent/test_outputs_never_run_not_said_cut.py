"""A job stopped before it started never ran: it has no outputs, and ``zen jobs get`` says nothing of an upload that
failed. The final report's ``nothing uploaded to ... (no _ZEN_OUTPUTS.json: not whole)``, the line of a job stopped
over its disk share (its outputs left unsent), was written for every attempt whose outputs were not uploaded: ``zen jobs
get`` then showed "NOT whole: the upload failed or was cut" for a job whose upload never began (stopped, or ended in
its staging or its image's pull). The agent with the fake transport (no Cloud Storage: nothing is uploaded)."""

from __future__ import annotations

from tests.agent.test_stop_before_start import _stop
from tests.agent.test_stop_while_secrets_fail import stopped_while_reading_secrets
from zen.cli.records import outputs_whereabouts

OUTPUTS = "gs://out-bkt/runs"


def test_a_job_stopped_before_it_started_is_not_said_to_have_its_upload_cut(tmp_path):
    def read_secret(transport) -> bytes:  # the user's stop comes while the agent reads the secret
        _stop(transport)
        return b"value"

    final, ran = stopped_while_reading_secrets(tmp_path, read_secret, outputs=OUTPUTS)
    assert final.status.value == "STOPPED" and not ran, final
    said = outputs_whereabouts(OUTPUTS, "j1", 1, 1, True, final.message)  # as zen jobs get shows it
    assert said == f"{OUTPUTS}/j1/attempt-1/ (whole once it holds _ZEN_OUTPUTS.json, written last)", final.message
