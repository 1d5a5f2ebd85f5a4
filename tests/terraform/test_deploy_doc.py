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


def test_the_guides_quota_prerequisite_names_the_model_the_default_configuration_runs():
    """The prerequisites said "GPU quota ... (Spot, by default)", from when terraform's `spot` defaulted to true: a
    cluster that lists no `provisioning` is standard in Zen and terraform alike, and draws on NVIDIA_*_GPUS."""
    import re

    from tests.terraform.hcl import Module
    from zen.core.config import load_config
    from zen.core.quotas import gpu_metric

    config = load_config(ROOT / "shared" / "zen" / "core" / "default_config.yaml")
    drawn = {gpu_metric(c.gpu_type, m) for c in config.clusters for m in c.provisioning}
    assert drawn and not any(metric.startswith("PREEMPTIBLE_") for metric in drawn), drawn
    assert 'c.provisioning : ["standard"]' in Module.load().locals["cluster_provisioning"]
    guide = re.sub(r"\s+", " ", (ROOT / "docs" / "how-to" / "deploy.md").read_text())
    prerequisites = guide.split("**Who applies**")[0]
    assert "Spot, by default" not in prerequisites and "standard, the `NVIDIA_*_GPUS` quotas" in prerequisites
