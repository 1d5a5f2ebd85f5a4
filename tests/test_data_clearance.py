"""Data clearance (data_clearance): a job whose data lies under a bound prefix runs only on VMs carrying
the binding's tags whether or not it asked (its requires_tags are widened at submission, and its history
says why), is refused where no allowed region carries them, and a claim from a VM without them is refused
even when the stored job lacks the tags (the claim check computes them from the job's data)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.messages import heartbeat, job_request
from zen.core.clearance import ClearanceBinding, clearance_of, touches
from zen.core.config import ZenConfig, load_config
from zen.core.errors import ConfigError
from zen.store import repository

PRIVATE = "gs://genomics-private/"
BINDING = [{"prefix": "gs://genomics-private", "tags": ["hipaa"]}]
INPUT = [{"uri": "gs://genomics-private/cohort-7/", "size_gb": 1}]


def configured(config, clearance=None, region_tags=None) -> ZenConfig:
    """The test configuration with us-central1 of 4xa100-40gb tagged hipaa, and ``clearance`` bound."""
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster["region_tags"] = {"us-central1": ["hipaa"]} if region_tags is None else region_tags
    raw["data"]["bucket_locations"] = {"genomics-private": "us-central1", "results": "us-central1"}
    raw["data_clearance"] = clearance if clearance is not None else BINDING
    return ZenConfig.model_validate(raw)


def functions_with(zen_config, db, publisher, clock):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(zen_config, db, publisher, clock)
    return zen, FunctionsInvoker(zen)


@pytest.fixture
def cleared(config, db, publisher, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return functions_with(configured(config), db, publisher, clock)


def orders_of(publisher, vm):
    return [json.loads(m.data)["action"] for m in publisher.on("zen-vm-control") if json.loads(m.data)["vm"] == vm]


def reasons(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [r["reason"] for r in repository.list_rejections(session)]


# -- the configuration ---------------------------------------------------------------------------

def write(config, tmp_path, clearance, region_tags=None):
    raw = json.loads(configured(config, [], region_tags).model_dump_json())
    raw["data_clearance"] = clearance
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("clearance, message", [
    ([{"prefix": "s3://genomics-private/", "tags": ["hipaa"]}], "data_clearance.0.prefix: .*is not a gs:// URI"),
    ([{"prefix": "gs://Genomics/", "tags": ["hipaa"]}], "data_clearance.0.prefix: .*bucket names are"),
    ([{"prefix": "gs://genomics-private/", "tags": []}], "data_clearance.0.tags: List should have at least 1"),
    ([{"prefix": "gs://genomics-private/", "tags": ["hipa"]}],
     r"data_clearance\[0\] \(gs://genomics-private/\): no cluster carries the tags \['hipa'\] .*tags in use: hipaa"),
    ([{"prefix": "gs://a-bucket/", "tags": ["hipaa"]}, {"prefix": "gs://a-bucket", "tags": ["hipaa"]}],
     r"data_clearance\[1\] \(gs://a-bucket/\): the prefix is bound twice"),
    ([{"prefix": "gs://genomics-private/", "tags": ["hipaa", "secure"]}],
     r"data_clearance\[0\] \(gs://genomics-private/\): no cluster region carries all of \['hipaa', 'secure'\]"),
])
def test_a_binding_is_refused_at_load_naming_its_entry(config, tmp_path, clearance, message):
    path = write(config, tmp_path, clearance, {"us-central1": ["hipaa"], "us-west1": ["secure"]})
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_valid_binding_loads_with_its_bucket_as_a_prefix(config, tmp_path):
    path = write(config, tmp_path, [{"prefix": "gs://genomics-private", "tags": ["hipaa", "hipaa"]}])
    [binding] = load_config(path).data_clearance
    assert (binding.prefix, binding.tags, binding.bucket) == ("gs://genomics-private/", ["hipaa"], "genomics-private")


def test_what_a_binding_covers():
    assert touches("gs://genomics-private/a.csv", PRIVATE)
    assert not touches("gs://genomics-private-2/a.csv", PRIVATE)  # a bucket alone is not a string prefix
    assert touches("gs://bkt/", "gs://bkt/private/") and touches("gs://bkt", "gs://bkt/private/")  # staging lists it
    assert touches("gs://bkt/private", "gs://bkt/private/")  # an object of that name, or the prefix private/
    assert not touches("gs://bkt/priv", "gs://bkt/private/") and not touches("gs://bkt/public/x", "gs://bkt/private/")
    bindings = [ClearanceBinding(prefix="gs://bkt/private/", tags=["hipaa"]),
                ClearanceBinding(prefix="gs://bkt/", tags=["secure"]), ClearanceBinding(prefix="gs://cbk/", tags=["x"])]
    both = clearance_of(bindings, ["gs://bkt/private/x"])
    assert both is not None and (both.tags, both.prefixes) == (("hipaa", "secure"), ("gs://bkt/private/", "gs://bkt/"))
    assert clearance_of(bindings, ["gs://dbk/x"]) is None and clearance_of(bindings, []) is None


# -- submission ----------------------------------------------------------------------------------

def test_a_job_reading_bound_data_gets_the_tags_and_its_history_says_why(cleared, publisher):
    zen, functions = cleared
    functions.submit(job_request("gen-1", inputs=INPUT))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "gen-1")
        first, *_ = repository.job_history(session, "gen-1")
    assert (job.status.value, job.regions, job.request["requires_tags"]) == ("QUEUED", ["us-central1"], ["hipaa"])
    assert first["reason"] == ("submitted; requires_tags widened to ['hipaa']: its data under gs://genomics-private/ "
                               "may be read only by VMs tagged ['hipaa'] (data_clearance)")
    [start] = publisher.on("zen-job-start")
    assert start.attributes["requires_tags"] == "hipaa" and "allow_us_west1" not in start.attributes


def test_a_job_writing_into_bound_data_gets_the_tags_too(cleared):
    zen, functions = cleared
    functions.submit(job_request("gen-2", outputs="gs://genomics-private/results", requires_tags=["hipaa"]))
    functions.submit(job_request("gen-3", outputs="gs://results/out"))  # unbound: as before
    with zen.db.transaction() as session:
        bound, free = repository.get_job(session, "gen-2"), repository.get_job(session, "gen-3")
        [first, *_] = repository.job_history(session, "gen-2")
    assert bound.regions == ["us-central1"] and first["reason"] == "submitted"  # it asked: nothing widened
    assert "requires_tags" not in free.request and len(free.regions) == 3


def test_a_job_whose_allowed_clusters_cannot_read_its_data_is_refused_naming_the_prefix(cleared):
    zen, functions = cleared
    functions.submit(job_request("gen-4", inputs=INPUT, regions=["us-west1", "europe-west4"]))
    functions.submit(job_request("gen-5", cluster="1xl4", inputs=INPUT))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "gen-4") is None and repository.get_job(session, "gen-5") is None
    west, l4 = reasons(zen)
    assert west == ("no allowed region of cluster 4xa100-40gb carries the tags ['hipaa'] (tags by region: "
                    "us-west1: none; europe-west4: none): its data under gs://genomics-private/ may be read only by "
                    "VMs tagged ['hipaa'] (data_clearance); run it where those tags are")
    assert l4.startswith("no allowed region of cluster 1xl4 carries the tags ['hipaa']") and PRIVATE in l4


def test_zen_submit_refuses_it_before_publishing(config, tmp_path, monkeypatch):
    from zen.cli.kit import CliError
    from zen.cli.user import check_request
    from zen.core.models import JobRequest

    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(configured(config).model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert check_request(JobRequest.model_validate(job_request("gen-6", inputs=INPUT))) == (
        "4xa100-40gb", ["us-central1"])
    with pytest.raises(CliError, match="gs://genomics-private/ may be read only by VMs tagged"):
        check_request(JobRequest.model_validate(job_request("gen-7", inputs=INPUT, cluster="1xl4")))


# -- the claim -----------------------------------------------------------------------------------

def test_only_a_cleared_vm_may_claim_it(cleared, publisher):
    zen, functions = cleared
    functions.submit(job_request("gen-8", inputs=INPUT))
    functions.heartbeat(heartbeat("gen-8", "CLAIMED", 1, vm="vm-plain", tags=["gpu"]))  # a misrouted start
    functions.heartbeat(heartbeat("gen-8", "CLAIMED", 2, vm="vm-hipaa", tags=["hipaa"]))
    assert orders_of(publisher, "vm-plain") == ["RELEASE"] and orders_of(publisher, "vm-hipaa") == ["CONFIRM"]
    [release] = [m for m in publisher.on("zen-vm-control") if json.loads(m.data)["vm"] == "vm-plain"]
    assert release.attributes["refused"] == "data-not-cleared"
    assert reasons(zen) == ["VM vm-plain lacks the tags ['hipaa']: its data under gs://genomics-private/ may be "
                            "read only by VMs tagged ['hipaa'] (data_clearance); VM vm-plain is scaled down: its "
                            "template is older than us-central1's tags ['hipaa']"]  # which its region carries
    with zen.db.transaction() as session:
        assert repository.get_job(session, "gen-8").vm == "vm-hipaa"


def test_a_job_stored_without_the_tags_is_still_refused_to_an_uncleared_vm(config, db, publisher, clock, db_url,
                                                                           monkeypatch):
    """The binding came after the job was accepted (or its row lacks the tags): the claim check reads the
    tags from its data and the configuration now, not from the row."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen, functions = functions_with(configured(config, clearance=[]), db, publisher, clock)
    functions.submit(job_request("gen-9", inputs=INPUT))
    functions.submit(job_request("gen-10", inputs=INPUT, regions=["us-west1"]))
    zen, functions = functions_with(configured(config), db, publisher, clock)
    functions.heartbeat(heartbeat("gen-9", "CLAIMED", 1, vm="vm-plain"))  # us-central1 carries hipaa; the VM does not
    functions.heartbeat(heartbeat("gen-10", "CLAIMED", 1, vm="vm-west", region="us-west1", zone="us-west1-b"))
    with zen.db.transaction() as session:
        stored, west = repository.get_job(session, "gen-9"), repository.get_job(session, "gen-10")
    assert "requires_tags" not in stored.request and (stored.status.value, stored.vm) == ("QUEUED", None)
    assert orders_of(publisher, "vm-plain") == ["RELEASE"] and orders_of(publisher, "vm-west") == ["RELEASE"]
    assert reasons(zen)[0].startswith("VM vm-plain lacks the tags ['hipaa']: its data under gs://genomics-private/")
    # its only region cannot read the data now: it waits (its claim refused), the reason naming the data
    assert west.status.value == "PENDING" and "gs://genomics-private/" in reasons(zen)[-1] and west.hold
    functions.heartbeat(heartbeat("gen-9", "CLAIMED", 2, vm="vm-hipaa", tags=["hipaa"]))
    assert orders_of(publisher, "vm-hipaa") == ["CONFIRM"]


def test_zen_explain_names_the_binding_while_the_job_waits(cleared, config, db, tmp_path, monkeypatch, capsys):
    from zen.cli.queues import explain_job

    zen, functions = cleared
    functions.submit(job_request("gen-11", inputs=INPUT))
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(configured(config).model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert explain_job("gen-11", False, db) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("gen-11: QUEUED - admitted; waiting for a VM of 4xa100-40gb in us-central1")
    assert line.endswith("; its data under gs://genomics-private/ may be read only by VMs tagged ['hipaa'] "
                         "(data_clearance)")


def test_of_several_gpu_shapes_only_those_that_can_read_the_data_remain(cleared):
    zen, functions = cleared
    functions.submit(job_request("gen-12", cluster=None, gpu_types=["nvidia-l4", "nvidia-tesla-a100"], gpu_count=1,
                                 inputs=INPUT))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "gen-12")
    assert (job.cluster, job.regions, job.request["requires_tags"]) == ("4xa100-40gb", ["us-central1"], ["hipaa"])
