"""An attempt's outputs in Cloud Storage say whether they are whole (``zen.agent.output_manifest``): nothing under the
attempt's prefix told a complete upload from one a shutdown cut or a failure ended part-way, so a pipeline reading the
prefix took a partial one for the job's outputs. The agent writes ``_ZEN_OUTPUTS.json`` last, once every file is
stored, and never when one was left out or the upload was cut. Real jobs, the Cloud Storage stand-in, the official
client, a fake Pub/Sub transport."""

from __future__ import annotations

import json
import sys
import threading

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_staging import attempt_data, client, objects, run_one  # noqa: F401 (fixture)
from tests.agent.test_upload_end import finals, settings, uploading
from zen.agent.output_manifest import MANIFEST
from zen.agent.staging import AttemptData
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

WRITES = ("import os, pathlib; o = pathlib.Path(os.environ['ZEN_OUTPUT_DIR']); (o / 'metrics').mkdir(); "
          "(o / 'metrics' / 'loss.json').write_text('{\"loss\": 0.1}'); (o / 'model.bin').write_bytes(b'w' * 5000)")


def test_a_whole_upload_ends_with_the_manifest_listing_every_file_as_stored(client, tmp_path):  # noqa: F811
    reports = run_one(tmp_path, start_message("whole", command=[sys.executable, "-c", WRITES], outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert (final.status.value, final.exit_code) == ("SUCCEEDED", 0), final.message
    stored = {blob.name: blob for blob in client.list_blobs("out-bkt", prefix="r/whole/attempt-1/")}
    manifest_blob = stored.pop(f"r/whole/attempt-1/{MANIFEST}")
    manifest = json.loads(manifest_blob.download_as_bytes())
    assert (manifest["job_id"], manifest["attempt"], manifest["prefix"]) == ("whole", 1, "gs://out-bkt/r/whole/attempt-1/")
    assert [(f["name"], f["size"]) for f in manifest["files"]] == [("metrics/loss.json", 13), ("model.bin", 5000)]
    assert (manifest["total_files"], manifest["total_bytes"]) == (2, 5013)
    for item in manifest["files"]:  # as Cloud Storage holds each
        blob = stored[f"r/whole/attempt-1/{item['name']}"]
        assert (item["crc32c"], item["md5"], item["generation"]) == (blob.crc32c, blob.md5_hash, blob.generation)
    assert manifest_blob.generation > max(blob.generation for blob in stored.values())  # written last
    assert f"to gs://out-bkt/r/whole/attempt-1/ ({MANIFEST} written last: whole)" in final.message
    assert (manifest["status"], manifest["exit_code"], manifest["skipped"]) == ("SUCCEEDED", 0, [])


def test_a_failed_jobs_whole_outputs_say_it_failed(client, tmp_path):  # noqa: F811
    """Its outputs (its logs, a partial model) are uploaded whole all the same: a manifest of whole outputs alone read
    as a job that succeeded (as a ``_SUCCESS``), and a pipeline took a failed attempt's partial model."""
    program = [sys.executable, "-c", WRITES + "; raise SystemExit(3)"]
    reports = run_one(tmp_path, start_message("failed", command=program, outputs="gs://out-bkt/r"))

    assert (reports[-1].status.value, reports[-1].exit_code) == ("FAILED", 3)
    manifest = json.loads(objects(client, "out-bkt", manifests=True)[f"r/failed/attempt-1/{MANIFEST}"])
    assert (manifest["status"], manifest["exit_code"], manifest["total_files"]) == ("FAILED", 3, 2)


def test_a_gang_nodes_manifest_is_its_own_under_its_node_prefix(client, tmp_path):  # noqa: F811
    data = AttemptData("g", 1, [], "gs://out-bkt/r", tmp_path / "work", node=1)
    data.prepare()
    (data.output_dir / "part").write_text("node one")

    data.upload()

    manifest = json.loads(objects(client, "out-bkt", manifests=True)[f"r/g/attempt-1/node-1/{MANIFEST}"])
    assert (manifest["node"], [f["name"] for f in manifest["files"]]) == (1, ["part"])


def test_an_attempt_that_wrote_nothing_is_whole_and_empty(client, tmp_path):  # noqa: F811
    data = attempt_data(tmp_path, outputs="gs://out-bkt/r", job_id="none")

    data.upload()

    manifest = json.loads(objects(client, "out-bkt", manifests=True)[f"r/none/attempt-1/{MANIFEST}"])
    assert (manifest["files"], manifest["total_files"], manifest["total_bytes"]) == ([], 0, 0)


def test_a_file_left_out_writes_no_manifest(client, tmp_path):  # noqa: F811
    """A file Cloud Storage cannot name is left out, the rest uploaded: the prefix is not whole."""
    writes = WRITES + "; (o / 'line\\nbreak').write_text('x')"
    reports = run_one(tmp_path, start_message("part", command=[sys.executable, "-c", writes], outputs="gs://out-bkt/r"))

    assert (reports[-1].status.value, reports[-1].exit_code) == ("FAILED", 0)
    assert sorted(objects(client, "out-bkt", manifests=True)) == ["r/part/attempt-1/metrics/loss.json", "r/part/attempt-1/model.bin"]
    assert f"(no {MANIFEST}: not whole)" in reports[-1].message


def test_a_jobs_own_file_of_the_manifests_name_is_left_out_and_fails_the_job(client, tmp_path):  # noqa: F811
    """Uploaded, the job's file would pass for Zen's manifest of a prefix a cut left partial, or be overwritten."""
    writes = WRITES + f"; (o / '{MANIFEST}').write_text('{{\"mine\": 1}}'); (o / 'sub').mkdir(); " \
                      f"(o / 'sub' / '{MANIFEST}').write_text('deeper: no clash')"
    reports = run_one(tmp_path, start_message("own", command=[sys.executable, "-c", writes], outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert (final.status.value, final.exit_code) == ("FAILED", 0)
    assert sorted(objects(client, "out-bkt", manifests=True)) == ["r/own/attempt-1/metrics/loss.json", "r/own/attempt-1/model.bin",
                                                  f"r/own/attempt-1/sub/{MANIFEST}"]
    assert (f"zen: left out {MANIFEST} (the name of Zen's manifest of the outputs: rename it): not uploaded"
            in final.message)


def test_an_upload_the_shutdown_cut_as_its_last_file_went_up_writes_no_manifest(client, storage, tmp_path):  # noqa: F811
    """The last file's store is held until the VM's shutdown has cut the upload, then lands: every file is there, yet
    the upload was cut (reported PREEMPTED): no manifest, however late the transfer's thread ends."""
    held = storage.state.hold("loss.json", "store")  # the last (os.walk: a folder after its files)
    transport = FakeTransport(VM)  # the shutdown grace passes on the manual clock, while the store is held
    agent = make_agent(transport, settings(tmp_path, stop_grace_s=0.5))

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id="cut", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        if uploading(message) and held.reached.is_set():
            agent.request_shutdown("SIGTERM")
        return []

    transport.answer = zen
    transport.add_start(start_message("cut", command=[sys.executable, "-c", WRITES], outputs="gs://out-bkt/r"))
    try:
        agent.run()
    finally:
        held.release.set()
    for thread in threading.enumerate():  # the upload's thread, left to end by itself: its last decision made
        if thread.name == "zen-transfer":
            thread.join(30)

    final = finals(transport)["cut"]
    assert (final.status, final.exit_code) == (AgentStatus.PREEMPTED, 0), final.message
    assert "shut down while uploading outputs" in final.message
    assert sorted(objects(client, "out-bkt", manifests=True)) == ["r/cut/attempt-1/metrics/loss.json", "r/cut/attempt-1/model.bin"]


def test_a_gang_nodes_manifest_gives_its_nodes_end_not_the_jobs(client, tmp_path):  # noqa: F811
    """A gang's job ends as its nodes together do (``docs/how-to/multi-node.md``, "One fate"): node 0 exiting 0 and
    uploading its outputs, then node 1 failing, made the job FAILED, yet node 0's manifest said ``status``
    ``SUCCEEDED``, and a pipeline taking the outputs of an attempt whose status is ``SUCCEEDED`` took a failed gang's.
    A node knows its own end only: it says that (``node_status``, ``node_exit_code``), the job's status none."""
    from tests.agent.test_node_data import run_gang_node

    run_gang_node(tmp_path, "vm-rank0", 0)  # exits 0: its node's end, SUCCEEDED

    manifest = json.loads(objects(client, "out-bkt", manifests=True)[f"runs/gang-1/attempt-1/node-0/{MANIFEST}"])
    assert (manifest["status"], manifest["exit_code"]) == (None, None), manifest
    assert (manifest["node"], manifest["node_status"], manifest["node_exit_code"]) == (0, "SUCCEEDED", 0), manifest
