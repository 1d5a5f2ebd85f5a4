"""A job's ``secrets`` naming a regional secret's version (``projects/P/locations/L/secrets/NAME/versions/V``,
data kept in one location): accepted at submission as a global one is (``tests/test_secret_fields.py``), allowed
by a queue's patterns part by part (a global pattern never allows a regional name), read by the agent through the
official client against the Secret Manager stand-in, and read from Google through the client of the location's
own endpoint."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_queues import with_queues
from tests.test_secret_fields import QUEUES, REGIONAL, RESIDENT, assert_rejected, submitted_functions
from zen.adapters.secret_manager import google_client_options, location_of, secret_client, secret_reader
from zen.adapters.webhooks import notify_secret_reader
from zen.agent.secrets import resolve
from zen.core.secrets import allowed, secret_parts
from zen_dev.local.secret_manager import SecretManagerStandIn, SecretStore



@pytest.mark.parametrize("reference", [
    "projects/my-project/locations/Europe-West4/secrets/hf-token/versions/1",
    "projects/my-project/locations/eu/secrets/hf-token/versions/1",  # a multi-region: regional secrets are in regions
    "projects/my-project/locations/europe-west4/secrets/hf-token",
    "projects/my-project/locations//secrets/hf-token/versions/1",
])
def test_a_malformed_regional_reference_is_refused_naming_the_variable(functions, zen, publisher, reference):
    assert_rejected(functions, zen, publisher, job_request("j", secrets={"HF_TOKEN": reference}),
                    f"secrets: HF_TOKEN: {reference!r} is not a Secret Manager secret version: give "
                    "projects/<project>/secrets/<name>/versions/<version number or latest> (a regional secret: "
                    "projects/<project>/locations/<location>/secrets/<name>/versions/<version number or latest>)")


def test_a_queues_patterns_allow_regional_names_part_by_part(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = submitted_functions(with_queues(config, QUEUES), db, publisher, clock, db_url, monkeypatch)
    # research allows projects/my-project/secrets/hf-*/versions/*: global secrets only
    assert_rejected(functions, zen, publisher, job_request("j", secrets={"HF_TOKEN": REGIONAL}),
                    f"secret HF_TOKEN: queue research allows no reference {REGIONAL}")
    assert allowed(REGIONAL, ["projects/my-project/locations/*/secrets/hf-*/versions/*"])
    assert not allowed(REGIONAL, ["projects/my-project/locations/us-*/secrets/hf-*/versions/*"])
    assert not allowed("projects/my-project/secrets/hf-token/versions/1", RESIDENT[0]["secrets"])


def test_a_references_parts():
    assert secret_parts(REGIONAL) == ("my-project", "europe-west4", "hf-token")
    assert secret_parts("projects/locations/secrets/hf/versions/1") == ("locations", None, "hf")  # a project so named
    assert location_of(REGIONAL) == "europe-west4"
    assert location_of("projects/locations/secrets/hf/versions/1") is None


def test_google_is_asked_at_the_locations_own_endpoint():
    """The official client built with the options chosen for each location (anonymous: nothing is called)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import secretmanager

    def host(location: str | None) -> str:
        return secretmanager.SecretManagerServiceClient(
            credentials=AnonymousCredentials(), client_options=google_client_options(location))._transport._host

    assert host("europe-west4") == "secretmanager.europe-west4.rep.googleapis.com:443"
    assert host("us-central1") == "secretmanager.us-central1.rep.googleapis.com:443"
    assert host(None) == "secretmanager.googleapis.com:443"


def test_a_location_without_an_endpoint_is_refused_not_retried_as_an_outage():
    """A well-formed location that is no region (``europe-west99``): its endpoint's host does not exist, which gRPC
    gave as UNAVAILABLE, and the attempt was requeued unspent over and over, each VM retrying for the secrets'
    budget. The official client, at a host DNS says does not exist (``.invalid``: never one); a global name there
    stays an outage."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import secretmanager

    from zen.adapters.secret_manager import SecretDenied, SecretUnavailable, access

    client = secretmanager.SecretManagerServiceClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": "secretmanager.europe-west99.rep.invalid"})
    with pytest.raises(SecretDenied, match="no Secret Manager endpoint for location europe-west99"):
        access(client, "projects/my-project/locations/europe-west99/secrets/hf-token/versions/1")
    with pytest.raises(SecretUnavailable, match="Secret Manager unavailable"):
        access(client, "projects/my-project/secrets/hf-token/versions/1")


@pytest.fixture
def secret_manager():
    store = SecretStore({"projects/my-project/locations/europe-west4/secrets/hf-token": ["v1", "eu-token"],
                         "projects/my-project/locations/us-central1/secrets/hf-token": "us-token",
                         "projects/my-project/secrets/hf-token": "global-token",
                         "projects/my-project/locations/europe-west4/secrets/db-password": "hunter2"},
                        granted=["projects/my-project/locations/*/secrets/hf-*", "projects/my-project/secrets/hf-*"])
    with SecretManagerStandIn(store) as standin:
        yield standin


def test_the_agent_reads_regional_versions_with_one_client_per_location(secret_manager):
    built: list[str | None] = []

    def client(location: str | None):
        built.append(location)
        return secret_client(secret_manager.endpoint, location)  # the stand-in serves every location

    read = secret_reader(client)
    values = resolve({"EU": REGIONAL, "EU1": REGIONAL.replace("latest", "1"),
                      "US": "projects/my-project/locations/us-central1/secrets/hf-token/versions/latest",
                      "GLOBAL": "projects/my-project/secrets/hf-token/versions/latest"}, read)

    assert values == {"EU": "eu-token", "EU1": "v1", "US": "us-token", "GLOBAL": "global-token"}
    assert sorted(built, key=str) == [None, "europe-west4", "us-central1"]  # once each, at its first read
    assert secret_manager.store.calls[0] == REGIONAL  # asked by its full regional name


def test_a_regional_version_the_vm_may_not_read_fails_with_the_reason(secret_manager):
    from zen.agent.secrets import SecretsFailed

    denied = "projects/my-project/locations/europe-west4/secrets/db-password/versions/1"
    with pytest.raises(SecretsFailed) as failed:
        resolve({"T": denied}, secret_reader(lambda location: secret_client(secret_manager.endpoint, location)))
    assert failed.value.note == (f"zen: secret T: {denied}: permission denied (the VM's service account needs "
                                 "roles/secretmanager.secretAccessor on it)")


def test_the_notifiers_reader_reads_a_regional_version(secret_manager):
    text = notify_secret_reader(secret_reader(lambda location: secret_client(secret_manager.endpoint, location)))
    assert text(REGIONAL) == "eu-token"


def test_a_notification_target_naming_a_regional_secret_is_refused_with_the_reason():
    """The notifier's grant covers this project's global zen-notify-* secrets; a regional one would be refused
    at every delivery."""
    from zen.core.notify import NotificationsConfig, NotifyTarget, refused_target

    target = NotifyTarget.model_validate(
        {"slack": "projects/my-project/locations/europe-west4/secrets/zen-notify-ml/versions/latest"})
    assert refused_target(NotificationsConfig(), target, "notify.0", "my-project") == (
        "notify.0.slack: the notifier reads only global secrets, not one of location europe-west4: store the URL in "
        "projects/my-project/secrets/zen-notify-ml")
