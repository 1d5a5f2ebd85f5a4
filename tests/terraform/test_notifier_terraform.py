"""The notifier in terraform (notifications.tf), checked against the code: its function's entry point and
environment, the subscription that pushes it zen-job-events with the filter the code defines, its dead letter
and backoff, the one secret binding (conditioned on the configuration's secret prefix), and its database grants."""

from __future__ import annotations

from tests.terraform.hcl import Module, block
from zen.core.config import load_config
from zen.core.notify import NOTICE_FILTER

import pytest


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def test_the_notifier_runs_on_job_event_without_scaling(module):
    function = module.resources_of("google_cloudfunctions2_function")["notifier"]
    assert block(function["build_config"])["entry_point"] == "on_job_event"
    service = block(function["service_config"])
    assert service["service_account_email"] == "${google_service_account.notifier.email}"
    assert service["ingress_settings"] == "ALLOW_INTERNAL_ONLY"
    env = service["environment_variables"]
    assert 'ZEN_SCALING = "off"' in env and "google_sql_user.notifier.name" in env
    assert "event_trigger" not in function  # pushed by its own subscription


def test_its_subscription_filters_the_notices_and_dead_letters_what_keeps_failing(module):
    assert module.locals["notifier_filter"] == NOTICE_FILTER
    subscription = module.resources_of("google_pubsub_subscription")["notifier"]
    assert subscription["topic"] == '${google_pubsub_topic.zen["job_events"].id}'
    assert subscription["filter"] == "${local.notifier_filter}"
    push = block(subscription["push_config"])
    assert push["push_endpoint"] == "${google_cloudfunctions2_function.notifier.service_config[0].uri}"
    assert block(push["oidc_token"])["service_account_email"] == "${google_service_account.notifier.email}"
    dead = block(subscription["dead_letter_policy"])
    assert dead == {"dead_letter_topic": "${google_pubsub_topic.notifier_dead_letter.id}",
                    "max_delivery_attempts": "${var.max_delivery_attempts}"}
    assert block(subscription["retry_policy"]) == {"minimum_backoff": "10s", "maximum_backoff": "600s"}
    kept = module.resources_of("google_pubsub_subscription")["notifier_dead_letter"]
    assert kept["message_retention_duration"] == "604800s"
    assert module.resources_of("google_pubsub_topic")["notifier_dead_letter"]["name"] == "${local.notifier_topic}-dead-letter"


def test_it_reads_only_the_secrets_named_with_the_configured_prefix(module):
    binding = module.resources_of("google_project_iam_member")["notifier_reads_notify_secrets"]
    assert binding["role"] == "roles/secretmanager.secretAccessor"
    assert binding["member"] == "serviceAccount:${google_service_account.notifier.email}"
    assert block(binding["condition"])["expression"] == (
        'resource.name.startsWith("projects/${data.google_project.this.number}/secrets/${local.notify_secret_prefix}")')
    assert module.locals["notify_secret_prefix"] == '${try(local.zen_config.notifications.secret_prefix, "zen-notify-")}'
    assert load_config().notifications.secret_prefix == "zen-notify-"
    secret_bindings = module.resources_of("google_secret_manager_secret_iam_member")
    assert not [name for name, b in secret_bindings.items() if "notifier" in b["member"]]


def test_its_database_user_gets_its_tables_only(module):
    grants = module.outputs["db_grants_sql"]["value"]
    assert 'GRANT SELECT ON schema_migrations, jobs TO \\"${google_sql_user.notifier.name}\\";' in grants
    assert ('GRANT SELECT, INSERT, UPDATE, DELETE ON notifications, notification_endpoints TO '
            '\\"${google_sql_user.notifier.name}\\";') in grants
