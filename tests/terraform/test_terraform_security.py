"""Who may do what, read in terraform/: submitters publish on the two user topics only, the
read-only database role leaves the outbox's message bodies out, and pgaudit logs something."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap

import pytest

from tests.terraform.hcl import Module, block


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


# -- submitters ----------------------------------------------------------------------------------

def test_submitters_may_publish_on_the_submission_and_stop_topics_only(module):
    """Without a binding, operators grant roles/pubsub.publisher on the project, which also covers
    zen-heartbeats and zen-vm-control: a user could forge heartbeats and orders to VMs."""
    variable = module.variables["submitters"]
    assert variable["type"] == "${list(string)}" and variable["default"] == []
    assert module.locals["submitter_topics"] == ["job_submitted", "job_stop"]
    bindings = {name: body for name, body in module.resources_of("google_pubsub_topic_iam_member").items()
                if "submitter" in json.dumps(body) or "submitter" in name}
    assert list(bindings) == ["submitters"]
    binding = bindings["submitters"]
    assert binding["for_each"] == "${local.submitter_bindings}"
    assert binding["topic"] == "${google_pubsub_topic.zen[each.value.topic].name}"
    assert binding["role"] == "roles/pubsub.publisher"
    assert binding["member"] == "${each.value.member}"
    # Nothing else mentions var.submitters (no project-level or other topic binding).
    uses = [name for (rtype, name), body in module.resources.items() if "var.submitters" in json.dumps(body)]
    assert uses == [], uses


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_terraform_expands_submitters_to_one_binding_per_topic_and_member(module, tmp_path):
    expression = module.locals["submitter_bindings"]
    assert expression.startswith("${") and expression.endswith("}")
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        variable "submitters" {
          default = ["user:alice@example.com", "group:ml@example.com"]
        }
        locals {
          submitter_topics   = %s
          submitter_bindings = %s
        }
        """) % (json.dumps(module.locals["submitter_topics"]), expression[2:-1]))
    result = subprocess.run(["terraform", "console"], input="jsonencode(local.submitter_bindings)\n", cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    bindings = json.loads(json.loads(result.stdout.strip().splitlines()[-1]))
    assert sorted((b["topic"], b["member"]) for b in bindings.values()) == [
        ("job_stop", "group:ml@example.com"), ("job_stop", "user:alice@example.com"),
        ("job_submitted", "group:ml@example.com"), ("job_submitted", "user:alice@example.com"),
    ]


def test_submitters_must_be_iam_members(module):
    conditions = [v["condition"] for v in module.variables["submitters"]["validation"]]
    assert any("regex" in c and "user|group|serviceAccount" in c for c in conditions)


# -- the read-only database role -----------------------------------------------------------------

def reader_statements() -> list[str]:
    """db_grants_sql's zen_reader lines, in order (as test_terraform_deploy_risks reads them)."""
    from tests.terraform.hcl import TERRAFORM

    text = (TERRAFORM / "outputs.tf").read_text()
    return [s.replace('\\"', '"') for s in re.findall(r'^\s*"(.*zen_reader.*;)",$', text, flags=re.M) if "${" not in s]


def test_readers_do_not_see_the_outbox_message_bodies():
    """outbox.data is every message the functions publish, start messages with each job's request
    (its env) among them; `zen stats` reads only the backlog's count and age."""
    from zen.store import stats

    statements = reader_statements()
    everything = statements.index("GRANT SELECT ON ALL TABLES IN SCHEMA public TO zen_reader;")
    revoke = statements.index("REVOKE SELECT ON outbox FROM zen_reader;")
    assert revoke > everything
    [columns] = [re.fullmatch(r"GRANT SELECT \(([\w, ]+)\) ON outbox TO zen_reader;", s).group(1)
                 for s in statements[revoke + 1:] if s.startswith("GRANT SELECT (")]
    granted = {c.strip() for c in columns.split(",")}
    assert not granted & {"data", "attributes"}
    read = set(re.findall(r"\b(\w+)\b", stats.QUERIES["outbox_backlog"])) & {
        "id", "topic", "data", "attributes", "created_at", "sent_at", "publish_attempts", "last_error"}
    assert read <= granted, read - granted


# -- database audit ------------------------------------------------------------------------------

def test_pgaudit_logs_schema_and_privilege_changes(module):
    """cloudsql.enable_pgaudit alone audits nothing: pgaudit.log defaults to none on Cloud SQL, and
    the extension is created by SQL (Cloud SQL does not let terraform create it)."""
    settings = block(module.resources_of("google_sql_database_instance")["zen"]["settings"])
    flags = {f["name"]: f["value"] for f in settings["database_flags"]}
    assert flags["cloudsql.enable_pgaudit"] == "on"
    classes = set(flags["pgaudit.log"].split(","))
    assert {"ddl", "role"} <= classes
    # Not every statement: each heartbeat writes, and the log would cost more than the database.
    assert not classes & {"all", "read", "write"}
    assert "CREATE EXTENSION IF NOT EXISTS pgaudit;" in module.outputs["db_grants_sql"]["value"]
