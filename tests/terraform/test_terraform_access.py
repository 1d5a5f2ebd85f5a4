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

