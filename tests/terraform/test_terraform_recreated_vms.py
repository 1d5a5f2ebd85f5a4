"""A VM its MIG recreates boots from the MIG's template as it is now, not from the one the VM was first created from.

A MIG recreates a VM that GCE deleted or stopped outside it (a spot VM deleted at its preemption: its termination
action is DELETE) under the same name. GCE's default (``forceUpdateOnRepair`` NO) recreates it from the template it
was created from, and the update policy (OPPORTUNISTIC: no running VM is replaced for a new template) never moves it.
After an upgrade's `terraform apply`, a spot VM of the release before, preempted any time later, came back with that
release's agent, configuration, tags and service account, for as long as its name lived; and after a cluster's
models were reordered it came back spot where Zen takes a VM its MIG recreated as the model its template now gives
(``zen.jobs.claims``, docs/reference/configuration.md): a job accepting standard VMs only ran on it, priced as
standard. With ``force_update_on_repair`` YES the recreated VM is created from the MIG's template; a VM that runs is
still never replaced."""

from __future__ import annotations

from tests.terraform.hcl import ROOT, Module, block


def test_a_vm_its_mig_recreates_boots_from_the_migs_template_now():
    mig = Module.load().resources_of("google_compute_region_instance_group_manager")["zen"]
    assert "instance_lifecycle_policy" in mig, "every MIG, not only flex-start ones (a dynamic block there)"
    policy = block(mig["instance_lifecycle_policy"])
    assert policy["force_update_on_repair"] == "YES"
    # ... and no running VM is replaced for a new template, nor moved between zones.
    update = block(mig["update_policy"])
    assert update["type"] == "OPPORTUNISTIC" and update["instance_redistribution_type"] == "NONE"


def test_the_upgrade_guide_says_what_becomes_of_running_jobs_and_the_order():
    """The section told the order as one sentence (migrate before deploying) and nothing of running jobs; the deploy
    guide's numbered steps put the apply before the migration, which is a first deploy's order."""
    page = (ROOT / "docs" / "how-to" / "operate.md").read_text()
    section = " ".join(page.split("\n## Upgrades\n", 1)[1].split("\n## ", 1)[0].split())
    steps = ["make package", "zen db migrate", "terraform apply", "db_grants_sql"]
    places = [section.find(step) for step in steps]
    assert -1 not in places and places == sorted(places), dict(zip(steps, places))
    assert "no VM is restarted or replaced" in section and "boots from the new template" in section
