"""The artifacts bucket (terraform/main.tf) is versioned, and its objects are named after their hash: an apply that
ships new code deletes the old functions zip and agent wheel, which versioning keeps as noncurrent versions (to
restore by hand for a rollback). A rule on newer versions (``num_newer_versions``) never fires there, since no name
gains a newer version: every release's artifacts were kept, billed, for ever. A rule on noncurrent objects ends them."""

from __future__ import annotations

from tests.terraform.hcl import Module, block

NONCURRENT = {"days_since_noncurrent_time", "noncurrent_time_before"}


def test_the_artifacts_buckets_old_versions_are_deleted_some_days_after_they_stop_being_current():
    bucket = Module.load().resources_of("google_storage_bucket")["artifacts"]
    assert block(bucket["versioning"])["enabled"] is True  # a deleted release's artifacts stay restorable a while
    deletes = [block(rule["condition"]) for rule in bucket.get("lifecycle_rule", [])
               if block(rule["action"])["type"] == "Delete"]
    ending = [condition for condition in deletes if set(condition) & NONCURRENT]
    assert ending, f"no Delete rule on noncurrent versions: {deletes}"
    days = [condition["days_since_noncurrent_time"] for condition in ending if "days_since_noncurrent_time" in condition]
    assert days and all(int(d) >= 7 for d in days), days  # long enough to roll back by hand
    assert not any("num_newer_versions" in condition for condition in deletes), deletes  # never fires: names are hashes
