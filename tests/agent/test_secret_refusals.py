"""How Secret Manager refuses a job's secret, as the real service answers, read through the official client from
the stand-in: a 403 that is not IAM's (the API disabled in the project, the VM's access scopes, an organization's
VPC Service Controls) is given in the service's words, not as a role to grant; a version disabled or destroyed
(``latest`` too, which names the newest version whatever its state) fails the attempt naming the version and its
state, and a version enabled again is read by the next attempt."""

from __future__ import annotations

import grpc
import pytest

from tests.agent.helpers import job_command
from tests.agent.test_secrets import HF, config, secret_manager  # noqa: F401 (fixtures)
from zen.adapters.secret_manager import secret_client, secret_reader
from zen.agent.secrets import SecretsFailed, resolve
from zen.core.models import AgentStatus

API_DISABLED = ("Secret Manager API has not been used in project 123456789 before or it is disabled. Enable it by "
                "visiting https://console.developers.google.com/apis/api/secretmanager.googleapis.com/overview"
                "?project=123456789 then retry.")
ROTATED = "projects/my-project/secrets/hf-rotated"


def read(secret_manager, reference: str) -> dict[str, str]:
    return resolve({"T": reference}, secret_reader(lambda location: secret_client(secret_manager.endpoint, location)))


def test_a_403_that_is_not_iams_fails_the_job_in_the_services_words(scheduler, agents, secret_manager):
    agents.start("vm-a", ZEN_SECRETS_ENDPOINT=secret_manager.endpoint)
    secret_manager.store.fail_next(grpc.StatusCode.PERMISSION_DENIED, 1, API_DISABLED)
    scheduler.submit("sec-403", job_command("--print", "ran"), secrets={"HF_TOKEN": HF})

    job = scheduler.wait_status("sec-403", "FAILED")

    assert f"zen: secret HF_TOKEN: {HF}: permission denied: {API_DISABLED}" in job.message
    assert "needs roles/secretmanager.secretAccessor" not in job.message  # granting it would not help
    assert job.exit_code is None and "ran" not in job.message


def test_an_iam_denial_names_the_role_the_vms_account_needs(secret_manager):
    with pytest.raises(SecretsFailed) as failed:
        read(secret_manager, "projects/my-project/secrets/db-password/versions/1")
    assert failed.value.status is AgentStatus.FAILED
    assert failed.value.note.endswith("permission denied (the VM's service account needs "
                                      "roles/secretmanager.secretAccessor on it)")


@pytest.mark.parametrize("state", ["DISABLED", "DESTROYED"])
def test_a_version_not_enabled_fails_naming_it_and_latest_names_the_newest_whatever_its_state(secret_manager,
                                                                                               state):
    secret_manager.store.put(ROTATED, ["old-value-1", "new-value-2"])
    secret_manager.store.set_state(ROTATED, 2, state)

    for reference in (f"{ROTATED}/versions/latest", f"{ROTATED}/versions/2"):
        with pytest.raises(SecretsFailed) as failed:
            read(secret_manager, reference)
        assert failed.value.status is AgentStatus.FAILED  # running it again cannot help until someone acts
        assert failed.value.note == (f"zen: secret T: {reference}: cannot be read: "
                                     f"Secret Version [{ROTATED}/versions/2] is in {state} state.")
    assert read(secret_manager, f"{ROTATED}/versions/1") == {"T": "old-value-1"}  # a pinned version still reads


def test_a_version_enabled_again_is_read_by_the_next_attempt(secret_manager):
    secret_manager.store.put(ROTATED, ["old-value-1", "new-value-2"])
    secret_manager.store.set_state(ROTATED, 2, "DISABLED")
    with pytest.raises(SecretsFailed):
        read(secret_manager, f"{ROTATED}/versions/latest")

    secret_manager.store.set_state(ROTATED, 2, "ENABLED")

    assert read(secret_manager, f"{ROTATED}/versions/latest") == {"T": "new-value-2"}
