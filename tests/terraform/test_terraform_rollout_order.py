"""The order one `terraform apply` rolls an upgrade out in: the functions before the agents.

Messages refuse unknown fields (docs/reference/messages.md). Functions from before agents' reports were read
without the fields they do not know refuse a report from a newer agent and ack it: a CLAIMED with `gives_way`
(agents since 2026-12-05) was refused by the functions before, the claim never answered; a FAILED with `over_limit`
was lost, its job left RUNNING until the lost-job sweep ran it again. And a new field is acted on only by functions
that know it. A MIG's template is the agent its new VMs run, so the MIG takes a new template only after the
functions of the same apply are deployed."""

from __future__ import annotations

from tests.terraform.hcl import Module


def test_a_migs_new_template_waits_for_the_functions_of_the_same_apply():
    module = Module.load()
    mig = module.resources_of("google_compute_region_instance_group_manager")["zen"]
    assert "${google_cloudfunctions2_function.zen}" in mig.get("depends_on", []), mig.get("depends_on")
    # The template is the MIG's version: the MIG is what moves VMs created from now on to it.
    assert "google_compute_instance_template.zen[each.key].id" in mig["version"][0]["instance_template"]


def test_the_functions_wait_for_no_mig():
    """No cycle: nothing the functions are built from names a MIG (terraform would refuse the plan)."""
    module = Module.load()
    function = module.resources_of("google_cloudfunctions2_function")["zen"]
    text = repr(function)
    assert "google_compute_region_instance_group_manager" not in text
    assert "google_compute_instance_template" not in text
