"""The web console's pages look up their jobs' input bucket locations themselves, with the console's own service
account: a job's page and the queues page show each job's ``zen explain`` line (``zen.cli.queues.explain_line``),
whose data part (``_data_line``: ``zen.core.locality.egress_usd``) asks Cloud Storage where each input's bucket
is (``lookup_bucket``: storage.buckets.get) unless the configuration's data.bucket_locations says. Deployed, the
console ran as zen-fn-console, which had no role on any input bucket: every lookup was refused, and the console
showed a job's data as "in buckets of unknown location, not priced", where `zen explain` and the functions (which
may look up agent_input_buckets: iam.tf) knew where it is and what reading it costs."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.terraform.hcl import Module

INPUTS = [{"uri": "gs://asia-data/shards/", "size_gb": 50}]


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def test_a_console_job_page_looks_up_its_inputs_bucket_location(config, db, publisher, clock, db_url, monkeypatch,
                                                                tmp_path):
    """With the Cloud Storage stand-in: the page's data line comes from the console's own lookup."""
    from zen.adapters.joblogs import LocalReader
    from zen.app import Zen
    from zen.console.app import create_app
    from zen.console.viewers import local_identity
    from zen.core import locality
    from zen_dev.local.invoke import FunctionsInvoker
    from zen_dev.local.storage import StorageStandIn

    assert "asia-data" not in config.data.bucket_locations
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    with StorageStandIn() as standin:
        standin.state.create_bucket("asia-data", location="ASIA")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", standin.address)
        FunctionsInvoker(Zen(config, db, publisher, clock)).submit(job_request("d1", inputs=INPUTS))
        # What the submission's placement looked up is forgotten: the console's instance looks up on its own.
        monkeypatch.setattr(locality, "_looked_up", {})
        monkeypatch.setattr(locality, "_failed_at", {})
        app = create_app(config, db, local_identity("alice"), reader_factory=lambda: LocalReader(tmp_path), clock=clock)
        answer = app.test_client().get("/jobs/d1")
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200, html
    assert locality._looked_up == {"asia-data": "asia"}  # the console's code asked Cloud Storage
    assert "50 GB of input cross regions" in html, html


def test_the_console_may_look_up_each_input_buckets_location(module):
    """The console's account holds storage.buckets.get (roles/storage.legacyBucketReader, as the functions':
    bucket metadata and object names, none of their contents) on each of agent_input_buckets, and nothing else."""
    bindings = module.resources_of("google_storage_bucket_iam_member")
    assert "console_locates_inputs" in bindings, (
        "the console's job and queue pages look up their inputs' bucket locations (zen.core.locality), and "
        "terraform gives the console's account no role on any input bucket")
    binding = bindings["console_locates_inputs"]
    assert binding["role"] == bindings["function_locates_inputs"]["role"] == "roles/storage.legacyBucketReader"
    assert binding["member"] == "serviceAccount:${google_service_account.console[0].email}"
    assert binding["for_each"] == "${local.console ? toset(var.agent_input_buckets) : toset([])}"
    assert binding["bucket"] == "${each.value}"
