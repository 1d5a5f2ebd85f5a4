"""Access the deployment needs beyond the code's own API calls (review of the deploy): the function
builds read their source from Cloud Functions' copy, the functions may look up their inputs' bucket
locations (data locality), and the MIG scaler's condition holds whatever type Compute gives a
regional MIG. IAM conditions are evaluated here on resource names, the only attribute they use."""

from __future__ import annotations

import re

import pytest

from tests.terraform.hcl import ROOT, Module, block


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def holds(expression: str, name: str) -> bool:
    """An IAM condition (CEL) of the shapes used in iam.tf, evaluated for ``resource.name == name``:
    ``==``, ``startsWith``, ``extract("/x/{name}")``, ``&&``, ``||``."""
    assert "resource.type" not in expression and "resource.service" not in expression, expression

    def extract(value: str, template: str) -> str:
        prefix = template.split("{")[0]
        return value.split(prefix, 1)[1].split("/")[0] if prefix in value else ""

    python = (expression.replace("&&", " and ").replace("||", " or ").replace(".startsWith(", ".startswith(")
              .replace("resource.name", "name"))
    python = re.sub(r'name\.extract\(("[^"]*")\)', r"extract(name, \1)", python)
    return bool(eval(python, {"extract": extract}, {"name": name}))  # noqa: S307 - test input, our own file


# -- function builds -----------------------------------------------------------------------------

def test_function_builds_may_read_the_source_copy_cloud_functions_makes(module):
    """Gen2 builds fetch gs://gcf-v2-sources-<project number>-<region>/..., not our bucket's object
    (hashicorp/terraform-provider-google#20571): without Object Viewer there, every build fails."""
    binding = module.resources_of("google_project_iam_member")["build_reads_gcf_sources"]
    assert binding["role"] == "roles/storage.objectViewer"
    assert binding["member"] == "serviceAccount:${google_service_account.build.email}"
    assert module.locals["gcf_sources_bucket"] == "gcf-v2-sources-${data.google_project.this.number}-${var.region}"
    condition = block(binding["condition"])["expression"].replace("${local.gcf_sources_bucket}",
                                                                   "gcf-v2-sources-123-us-central1")
    assert holds(condition, "projects/_/buckets/gcf-v2-sources-123-us-central1")
    assert holds(condition, "projects/_/buckets/gcf-v2-sources-123-us-central1/objects/zen-on-heartbeat/source.zip")
    for other in ("projects/_/buckets/gcf-v2-sources-123-us-central1-other/objects/x",
                  "projects/_/buckets/gcf-v2-sources-123-europe-west4/objects/x", "projects/_/buckets/datasets"):
        assert not holds(condition, other), other
    # The functions are built only once the binding exists.
    depends = module.resources_of("google_cloudfunctions2_function")["zen"]["depends_on"]
    assert "${google_project_iam_member.build_reads_gcf_sources}" in depends


# -- data locality -------------------------------------------------------------------------------

# Cloud Storage client method (zen.core.locality) -> the IAM permission it needs.
STORAGE_PERMISSIONS = {"lookup_bucket": "storage.buckets.get"}


def test_functions_may_look_up_exactly_their_input_buckets_locations(module):
    """zen.core.locality reads each input bucket's location (placement, routing a start): a refused lookup
    leaves it unknown, and data locality is off without a word. The role holds what the code calls."""
    source = (ROOT / "shared" / "zen" / "core" / "locality.py").read_text()
    calls = set(re.findall(r"storage\.Client\([^)]*\)\.(\w+)", source))
    assert calls, "no Cloud Storage call found in locality.py"
    assert calls <= set(STORAGE_PERMISSIONS), f"unmapped Cloud Storage calls: {calls - set(STORAGE_PERMISSIONS)}"
    # roles/storage.legacyBucketReader holds storage.buckets.get (and objects.list, no object's
    # contents); a custom role of this project could not be granted on another project's bucket.
    assert {STORAGE_PERMISSIONS[c] for c in calls} <= {"storage.buckets.get", "storage.objects.list"}
    assert "bucket_locator" not in module.resources_of("google_project_iam_custom_role")

    binding = module.resources_of("google_storage_bucket_iam_member")["function_locates_inputs"]
    assert binding["role"] == "roles/storage.legacyBucketReader"
    assert binding["member"] == "serviceAccount:${google_service_account.function[each.value.function].email}"
    assert binding["for_each"] == "${local.function_input_buckets}"
    # Every function, on every input bucket (and no other bucket).
    pairs = module.locals["function_input_buckets"]
    assert "setproduct(keys(local.functions), toset(var.agent_input_buckets))" in pairs


def test_every_function_can_reach_the_bucket_lookup():
    """Why every function gets the role: each runs the job service, which places and routes starts
    (zen.jobs.placement and zen.core.routing call zen.core.locality) on submission, requeue, admission and widening."""
    shared = ROOT / "shared" / "zen"
    assert "from zen.core.locality import" in (shared / "core" / "routing.py").read_text()
    assert "from zen.core.locality import" in (shared / "jobs" / "placement.py").read_text()
    assert "from zen.core.routing import" in (shared / "jobs" / "decisions.py").read_text()
    assert "from zen.jobs.placement import" in (shared / "jobs" / "service.py").read_text()
    app = (shared / "app.py").read_text()

    def body(method: str) -> str:
        return app.split(f"def {method}(", 1)[1].split("\n    def ", 1)[0]

    for method in ("on_job_submitted", "on_heartbeat", "on_stop_requested", "_tick_steps"):  # the tick's steps
        own = body(method)  # and the bodies of the Zen methods it hands its envelope to (on_heartbeat: _heartbeat)
        reached = own + "".join(body(m) for m in set(re.findall(r"self\.(_[a-z_]+)\b", own)) if f"def {m}(" in app)
        assert "self.jobs." in reached, method
    assert "self._tick_steps(" in app.split("def on_scale_tick(", 1)[1].split("\n    def ", 1)[0]


def test_buckets_outside_the_binding_are_told_to_use_bucket_locations(module):
    description = module.variables["agent_input_buckets"]["description"]
    assert "data.bucket_locations" in description
    deploy = (ROOT / "docs" / "how-to" / "deploy.md").read_text()
    assert "agent_input_buckets" in deploy and "data.bucket_locations" in deploy


# -- the MIG scaler ------------------------------------------------------------------------------

def test_mig_scaler_condition_admits_the_zen_regional_migs_by_name_alone(module):
    """No resource.type clause: a regional MIG may be typed InstanceGroupManager or
    RegionInstanceGroupManager, and the wrong one would deny every resize."""
    expression = block(module.resources_of("google_project_iam_member")["mig_scaler"]["condition"])["expression"]
    expression = expression.replace("${var.project_id}", "p")
    assert holds(expression, "projects/p/regions/us-central1/instanceGroupManagers/zen-4xa100-40gb-us-central1")
    for name in ("projects/p/regions/us-central1/instanceGroupManagers/web",
                 "projects/p/zones/us-central1-a/instanceGroupManagers/zen-4xa100-40gb-us-central1",
                 "projects/other/regions/us-central1/instanceGroupManagers/zen-a"):
        assert not holds(expression, name), name
