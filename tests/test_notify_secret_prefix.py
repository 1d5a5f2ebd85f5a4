"""The notifier may read only the secrets whose names start with ``notifications.secret_prefix``. An empty prefix made
its IAM condition every secret of the project, and ``zen-`` the heartbeat function's VM proof key
(``zen-proof-secret``) among them: the configuration refuses an empty prefix, and terraform's plan one the proof
secret's name starts with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.terraform.hcl import Module
from zen.core.notify import NotificationsConfig


def test_an_empty_secret_prefix_is_refused():
    with pytest.raises(ValidationError, match="secret_prefix"):
        NotificationsConfig(secret_prefix="")
    assert NotificationsConfig(secret_prefix="team-notify-").secret_prefix == "team-notify-"


def test_terraform_refuses_a_prefix_of_the_proof_secrets_name():
    grant = Module.load().resources_of("google_project_iam_member")["notifier_reads_notify_secrets"]
    [check] = grant["lifecycle"][0]["precondition"]
    assert check["condition"] == ('${local.notify_secret_prefix != "" && !startswith('
                                  'google_secret_manager_secret.proof.secret_id, local.notify_secret_prefix)}')
