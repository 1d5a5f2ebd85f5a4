"""The deploy guide's commands name what terraform made through its outputs: the names follow
``var.name_prefix``, so a name written out (``zen-db``) is wrong for any other prefix."""

from __future__ import annotations

from tests.terraform.hcl import ROOT


def test_the_guide_names_the_database_instance_through_terraforms_output():
    sql = (ROOT / "terraform" / "sql.tf").read_text()
    assert '"${var.name_prefix}-db"' in sql
    guide = (ROOT / "docs" / "how-to" / "deploy.md").read_text()
    assert "--instance=zen-db" not in guide
    assert '--instance="$(terraform output -raw cloudsql_instance | cut -d: -f3)"' in guide
