"""`terraform destroy` of a deployment that ran (docs/how-to/deploy.md, "Tearing Zen down"): what Cloud SQL and
Service Networking refuse to delete on their own is left to go with what holds it, so the destroy gets through.

- ``google_sql_user.notifier``: db_grants_sql grants it privileges on tables itself (``GRANT SELECT ON ... TO``),
  and PostgreSQL refuses to drop a role that holds privileges, so Cloud SQL's users.delete fails.
- ``google_sql_database.zen``: Cloud SQL refuses to delete a PostgreSQL database other roles hold privileges in
  (the functions' roles and zen_reader, which the migrations and db_grants_sql make).
- ``google_service_networking_connection.private_services``: Service Networking refuses to delete it while Cloud
  SQL keeps producer resources behind it, which it does for a while after the instance is deleted.

Deleting the instance deletes the first two; the connection's peering is the guide's last step."""

from __future__ import annotations

import re

from tests.terraform.hcl import ROOT, Module


def test_what_cloud_sql_refuses_to_delete_is_left_to_the_instance_on_destroy():
    module = Module.load()
    for key in (("google_sql_user", "notifier"), ("google_sql_database", "zen"),
                ("google_service_networking_connection", "private_services")):
        assert module.resources[key].get("deletion_policy") == "ABANDON", key


def test_only_the_users_holding_privileges_of_their_own_are_abandoned():
    """A person removed from db_reader_users or db_admin_users loses their database user: only the zen_reader
    membership holds them, which DROP ROLE revokes. The notifier's own grants are what db_grants_sql names."""
    module = Module.load()
    users = module.resources_of("google_sql_user")
    assert {name for name, body in users.items() if body.get("deletion_policy") == "ABANDON"} == {"notifier"}
    grants = str(module.outputs["db_grants_sql"]["value"])
    assert re.search(r"GRANT SELECT ON [\w, ]*\bjobs TO \W*google_sql_user\.notifier\.name", grants), grants


def test_the_guide_says_what_destroy_leaves_and_what_it_reads():
    guide = re.sub(r"\s+", " ", (ROOT / "docs" / "how-to" / "deploy.md").read_text())
    teardown = guide.split("## Tearing Zen down")[1]
    assert "gcloud compute networks peerings delete servicenetworking-googleapis-com" in teardown
    assert "`make package` first, with the same `CONFIG`" in teardown
    assert "[VMs outside their MIGs](operate.md#vms-outside-their-migs)" in teardown


def test_the_migration_step_empties_the_virtualenv_an_earlier_release_left():
    """Every release's wheel is zen-0.1.0, and pip keeps an installed wheel of the same version ("zen is already
    installed with the same version as the provided wheel"): in /tmp/zen kept from the last upgrade, `zen db
    migrate` ran the old release's migrations, and the new functions answered 500 ("run zen db migrate")."""
    guide = (ROOT / "docs" / "how-to" / "deploy.md").read_text()
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version and "+" not in version.group(1)
    assert "python3.11 -m venv --clear /tmp/zen && /tmp/zen/bin/pip install ../dist/zen-*.whl" in guide
