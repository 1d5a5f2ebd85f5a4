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


def test_the_console_guide_names_the_redirect_uri_iaps_oauth_client_needs():
    """console.md had the user make an OAuth client for `console_oauth_client_id` and apply, and said nothing of
    the redirect URI IAP signs viewers in through: an OAuth client without it ends every sign-in in Google's
    `redirect_uri_mismatch` error, and the console is never reached."""
    import re

    from tests.terraform.hcl import Module

    backend = Module.load().resources_of("google_compute_backend_service")["console"]
    assert "${var.console_oauth_client_id}" in str(backend["iap"])  # a client of the user's own making
    guide = re.sub(r"\s+", " ", (ROOT / "docs" / "how-to" / "console.md").read_text())
    assert "https://iap.googleapis.com/v1/oauth/clientIds/CLIENT_ID:handleRedirect" in guide
    assert "Authorized redirect URIs" in guide


def test_the_guides_name_only_outputs_and_variables_terraform_has():
    """Each `terraform output NAME` the deploy, console and notification guides show names an output of terraform/,
    and each `NAME = value` they tell the user to set that looks like a variable is one (a misspelled name is an
    error at plan, or, for an output, an empty shell command)."""
    import re

    from tests.terraform.hcl import Module

    module = Module.load()
    pages = ["README.md", "docs/how-to/deploy.md", "docs/how-to/console.md", "docs/how-to/notifications.md",
             "docs/how-to/operate.md", "docs/explanations/security.md"]
    outputs, settings = set(), set()
    for page in pages:
        text = (ROOT / page).read_text()
        outputs |= set(re.findall(r"terraform output(?: -raw| -json)? ([a-z_]+)", text))
        settings |= set(re.findall(r"`([a-z][a-z0-9_]*) = ", text))
    assert outputs and outputs <= set(module.outputs), outputs - set(module.outputs)
    # Fields of the configuration or of a resource the guides quote as they stand, not variables to set.
    quoted = {"min_vms", "force_destroy", "provisioning", "instance_termination_action", "provisioning_model", "state",
              "deletion_policy"}
    assert settings - quoted <= set(module.variables), settings - quoted - set(module.variables)


def test_the_guides_gcloud_commands_that_name_a_project_resource_name_the_project():
    """Step 3's `gcloud sql users set-password` named the instance but not its project: with gcloud's default project
    another one (the guide passes --project everywhere else, and never has the user set a default), it answered that
    the instance does not exist, and the database could not be migrated. The state bucket was made in that default
    project too."""
    import re

    guide = (ROOT / "docs" / "how-to" / "deploy.md").read_text()
    named = re.compile(r"\s*gcloud (sql|storage buckets create|services)")
    commands = [line.strip() for line in guide.splitlines() if named.match(line)]
    assert len(commands) == 3, commands
    assert all("--project=MY-PROJECT" in command for command in commands), commands
