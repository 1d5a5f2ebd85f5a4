"""Deploy risks of issue 13 read in terraform/: a project without a `default` network, an API used but
not enabled, and an example that leaves the GPU zones to chance."""

from __future__ import annotations

import re

import pytest

from tests.terraform.hcl import TERRAFORM, Module, load

# Which API each resource type needs (a resource of a type missing here fails the test: add it).
API_OF_RESOURCE = {
    "google_logging_metric": "logging", "google_logging_project_exclusion": "logging",
    "google_monitoring_alert_policy": "monitoring",
    "google_monitoring_dashboard": "monitoring",
    "google_artifact_registry_repository": "artifactregistry", "google_artifact_registry_repository_iam_member":
    "artifactregistry", "google_cloud_run_service_iam_member": "run", "google_cloud_scheduler_job": "cloudscheduler",
    "google_cloudfunctions2_function": "cloudfunctions", "google_compute_global_address": "compute",
    "google_compute_instance_template": "compute", "google_compute_network": "compute", "google_compute_firewall": "compute",
    "google_compute_region_instance_group_manager": "compute", "google_compute_router": "compute",
    "google_compute_resource_policy": "compute",
    "google_compute_router_nat": "compute", "google_project_iam_custom_role": "iam",
    "google_project_iam_member": "cloudresourcemanager", "google_project_iam_audit_config": "cloudresourcemanager",
    "google_project_service": "serviceusage",
    "google_pubsub_subscription": "pubsub", "google_pubsub_subscription_iam_member": "pubsub",
    "google_pubsub_topic": "pubsub", "google_pubsub_topic_iam_member": "pubsub", "google_service_account": "iam",
    "google_service_account_iam_member": "iam", "google_service_networking_connection": "servicenetworking",
    "google_sql_database": "sqladmin", "google_sql_database_instance": "sqladmin", "google_sql_user": "sqladmin",
    "google_storage_bucket": "storage", "google_storage_bucket_iam_member": "storage",
    "google_storage_bucket_object": "storage", "google_vpc_access_connector": "vpcaccess",
    "google_project": "cloudresourcemanager", "google_compute_network#data": "compute",
    "google_secret_manager_secret": "secretmanager", "google_secret_manager_secret_iam_member": "secretmanager",
    "google_secret_manager_regional_secret_iam_member": "secretmanager",
    "google_billing_budget": "billingbudgets",
    # the web console behind Identity-Aware Proxy (console.tf)
    "google_compute_backend_service": "compute", "google_compute_global_forwarding_rule": "compute",
    "google_compute_managed_ssl_certificate": "compute", "google_compute_region_network_endpoint_group": "compute",
    "google_compute_ssl_policy": "compute", "google_compute_target_https_proxy": "compute",
    "google_compute_url_map": "compute", "google_iap_web_backend_service_iam_member": "iap",
}


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def enabled_apis(module: Module) -> set[str]:
    return set(re.findall(r'"([a-z]+)\.googleapis\.com"', module.resources_of("google_project_service")["apis"]["for_each"]))


def test_every_api_a_resource_uses_is_enabled(module):
    apis = enabled_apis(module)
    used = {(rtype, API_OF_RESOURCE.get(rtype)) for rtype, _ in module.resources if rtype != "terraform_data"}
    used |= {(dtype, API_OF_RESOURCE.get(dtype if dtype != "google_compute_network" else dtype + "#data"))
             for dtype, _ in module.data}
    assert all(api is not None for _, api in used), sorted(t for t, api in used if api is None)
    assert {api for _, api in used} <= apis, sorted({api for _, api in used} - apis)
    assert {"cloudresourcemanager", "serviceusage"} <= apis


def test_a_project_without_a_default_network_can_create_one(module):
    assert module.variables["create_network"]["default"] is False
    network = module.resources_of("google_compute_network")["zen"]
    assert network["count"] == "${var.create_network ? 1 : 0}" and network["auto_create_subnetworks"] is True
    firewall = module.resources_of("google_compute_firewall")["deny_ingress"]
    assert firewall["direction"] == "INGRESS" and firewall["source_ranges"] == ["0.0.0.0/0"] and "deny" in firewall
    assert module.data[("google_compute_network", "zen")]["count"] == "${var.create_network ? 0 : 1}"
    # Everything else (outside network.tf) goes through the locals that pick the created or the existing network.
    text = "\n".join(path.read_text() for path in TERRAFORM.glob("*.tf") if path.name != "network.tf")
    assert "google_compute_network.zen" not in text and "local.network_id" in text


def test_the_example_names_the_zones_of_every_cluster_region():
    from zen.core.config import load_config

    tfvars = load(TERRAFORM / "terraform.tfvars.example")
    for cluster in load_config().clusters:
        zones = tfvars["cluster_settings"][cluster.name]["zones"]
        assert sorted(zones) == sorted(cluster.regions), cluster.name
        for region, names in zones.items():
            assert names and all(re.fullmatch(rf"{region}-[a-z]", zone) for zone in names), (cluster.name, region)


def test_the_read_only_role_reads_jobs_and_writes_nothing(db, db_target, tmp_path):
    """db_grants_sql's zen_reader lines, run on a real Postgres: a reader runs `zen jobs list`, `zen
    rejected` and `zen stats`, cannot change a row, and cannot read the outbox's message bodies."""
    import os
    import subprocess
    import sys

    from zen.store.db import Database

    text = (TERRAFORM / "outputs.tf").read_text()
    statements = [s.replace('\\"', '"') for s in re.findall(r'^\s*"(.*zen_reader.*;)",$', text, flags=re.M)
                  if "${" not in s]
    assert len(statements) == 6
    with db.session() as session:
        for statement in statements + ["CREATE ROLE reader_alice LOGIN", "GRANT zen_reader TO reader_alice"]:
            session.execute(statement)
    url = f"postgresql://reader_alice@/{db_target.database}?host={os.path.dirname(db_target.unix_sock)}"
    for command, first in ((["jobs", "list"], "JOB_ID"), (["rejected"], "AT"), (["stats", "--json"], "{")):
        result = subprocess.run([sys.executable, "-m", "zen.cli.main", *command], cwd=tmp_path, capture_output=True,
                                text=True, env={**os.environ, "ZEN_DATABASE_URL": url}, timeout=120)
        assert result.returncode == 0 and result.stdout.startswith(first), (command, result.stderr)
    reader = Database.from_target(db_target.__class__(**{**db_target.__dict__, "user": "reader_alice"}))
    try:
        with pytest.raises(Exception, match="permission denied"):
            with reader.session() as session:
                session.execute("DELETE FROM jobs")
        with pytest.raises(Exception, match="permission denied"):
            with reader.session() as session:
                session.execute("SELECT data FROM outbox")
    finally:
        reader.close()
        with db.session() as session:
            session.execute("DROP OWNED BY reader_alice")
            session.execute("DROP ROLE reader_alice")


def test_db_admins_are_not_told_to_migrate_as_themselves(module):
    """Migrations run as `postgres` (docs/how-to/deploy.md, step 3): the variable and the example say so and
    no longer offer db_admin_users for `zen db migrate`; the read commands need db_reader_users."""
    description = module.variables["db_admin_users"]["description"]
    assert "or run `zen db migrate`" not in description
    assert "`postgres`" in description and "db_reader_users" in description
    example = (TERRAFORM / "terraform.tfvars.example").read_text()
    assert "(e.g. to run `zen db migrate`)" not in example
    for page in (TERRAFORM.parent / "README.md", TERRAFORM.parent / "docs" / "how-to" / "deploy.md"):
        text = page.read_text()
        assert "as the built-in `postgres` user" in text, page
        assert "or `db_admin_users`, then" not in text, page


def test_a_login_without_grants_cannot_migrate(pg_server):
    """Why: an IAM database user is a login role with no privileges; on PostgreSQL 16 it may not create
    in schema public, so `zen db migrate` as a db_admin_users identity fails on its first table."""
    import dataclasses

    from zen.store.db import Database
    from zen.store.migrate import migrate

    admin = Database.from_target(pg_server)
    name = "migrate_as_iam_user"
    with admin.session() as session:
        session.execute(f"DROP DATABASE IF EXISTS {name}")
        session.execute(f"CREATE DATABASE {name}")
        session.execute("DROP ROLE IF EXISTS iam_alice")
        session.execute("CREATE ROLE iam_alice LOGIN")
    alice = Database.from_target(dataclasses.replace(pg_server.with_database(name), user="iam_alice"))
    try:
        with pytest.raises(Exception, match="permission denied for schema public"):
            migrate(alice)
    finally:
        alice.close()
        with admin.session() as session:
            session.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            session.execute("DROP ROLE IF EXISTS iam_alice")
        admin.close()


def test_a_failed_tick_is_dropped_not_retried_nor_dead_lettered(module):
    """The scheduler publishes ticks from the first apply, before the database is migrated: retried,
    each fresh deploy filled the tick's dead-letter topic and fired its alert. Ticks are
    interchangeable (the next comes a minute later), so the tick's trigger does not retry and has no
    dead-letter topic; the other three still retry and dead-letter."""
    functions = module.locals["functions"]
    assert {name: f["retry"] for name, f in functions.items()} == {
        "on_job_submitted": True, "on_heartbeat": True, "on_stop_requested": True, "on_scale_tick": False}
    trigger = module.resources_of("google_cloudfunctions2_function")["zen"]["event_trigger"][0]
    assert trigger["retry_policy"] == '${each.value.retry ? "RETRY_POLICY_RETRY" : "RETRY_POLICY_DO_NOT_RETRY"}'
    assert module.locals["dead_lettered"] == \
        "${{for name, topic in local.trigger_topics : name => topic if local.functions[name].retry}}"
    # Every dead-letter piece follows the retried triggers: topics, keep-subscriptions (which the alert
    # and the dashboard watch), the service agent's publisher binding, the gcloud hook.
    for rtype, name in (("google_pubsub_topic", "dead_letter"), ("google_pubsub_subscription", "dead_letter"),
                        ("google_pubsub_topic_iam_member", "dead_letter_publisher")):
        assert module.resources_of(rtype)[name]["for_each"] == "${local.dead_lettered}", (rtype, name)
    hook = module.resources_of("terraform_data")["trigger_dead_letter"]
    assert hook["for_each"] == "${var.attach_dead_letter_topics ? local.dead_lettered : {}}"
    dashboard = (TERRAFORM / "monitoring_dashboard.tf").read_text()
    assert "for sub in google_pubsub_subscription.dead_letter" in dashboard
