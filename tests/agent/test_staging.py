"""A job's inputs and outputs (zen.agent.staging) with the official Cloud Storage client against the
stand-in (zen_dev.local.storage): staging an object and a prefix, the output layout, the failures, and
the agent loop reporting them (real jobs, a fake Pub/Sub transport)."""

from __future__ import annotations

import os
import sys

import pytest
from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_slots import IDENTITY as IDENTITY_SHARED, VM as VM_SHARED
from zen.agent.agent import Agent
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots
from zen.agent.output_manifest import MANIFEST
from zen.agent.staging import AttemptData, Cancelled, TransferError
from zen.core.models import Heartbeat, InputSpec

BIG = 9 * 1024 * 1024  # above the client's 8 MiB multipart limit: a resumable upload


@pytest.fixture
def client(storage):
    client = gcs.Client()
    for name in ("data-bkt", "out-bkt"):
        client.create_bucket(name)
    bucket = client.bucket("data-bkt")
    bucket.blob("corpus/words.txt").upload_from_string(b"alpha beta\n")
    bucket.blob("shards/part-0").upload_from_string(b"0" * 10)
    bucket.blob("shards/deep/part-1").upload_from_string(b"1" * 20)
    bucket.blob("shards-other/x").upload_from_string(b"not under shards/")
    return client


def attempt_data(tmp_path, inputs=(), outputs=None, job_id="j1", attempt=1) -> AttemptData:
    data = AttemptData(job_id, attempt, [InputSpec(uri=uri) for uri in inputs], outputs, tmp_path / "work")
    data.prepare()
    return data


def objects(client, bucket, prefix="", manifests=False) -> dict[str, bytes]:
    """The bucket's objects; without each attempt's manifest of its outputs unless ``manifests``
    (``zen.agent.output_manifest``: tests/agent/test_output_manifest.py)."""
    return {blob.name: blob.download_as_bytes() for blob in client.list_blobs(bucket, prefix=prefix)
            if manifests or not blob.name.endswith("/" + MANIFEST)}


def test_an_object_and_a_prefix_are_staged_under_their_last_names_with_bytes_counted(client, tmp_path):
    data = attempt_data(tmp_path, ["gs://data-bkt/corpus/words.txt", "gs://data-bkt/shards"])

    data.stage()

    staged = sorted(p.relative_to(data.input_dir).as_posix() for p in data.input_dir.rglob("*") if p.is_file())
    assert staged == ["shards/deep/part-1", "shards/part-0", "words.txt"]  # shards-other/ is not under shards/
    assert (data.input_dir / "words.txt").read_bytes() == b"alpha beta\n"
    assert (data.staged.files, data.staged.bytes) == (3, 41)
    fields = data.heartbeat_fields()
    assert fields["staged_bytes"] == 41 and fields["staged_s"] >= 0 and "uploaded_bytes" not in fields
    assert data.summary().startswith("zen: staged 3 files, 41 B in ")


def test_the_output_dir_is_uploaded_under_outputs_job_and_attempt(client, tmp_path):
    data = attempt_data(tmp_path, outputs="gs://out-bkt/runs/", job_id="train-7", attempt=2)
    (data.output_dir / "metrics").mkdir()
    (data.output_dir / "metrics" / "loss.json").write_text('{"loss": 0.1}')
    (data.output_dir / "model.bin").write_bytes(os.urandom(BIG))

    data.upload()

    stored = objects(client, "out-bkt")
    assert sorted(stored) == ["runs/train-7/attempt-2/metrics/loss.json", "runs/train-7/attempt-2/model.bin"]
    assert stored["runs/train-7/attempt-2/model.bin"] == (data.output_dir / "model.bin").read_bytes()
    assert (data.uploaded.files, data.uploaded.bytes) == (2, BIG + 13)
    assert data.destination() == "gs://out-bkt/runs/train-7/attempt-2/"
    assert "uploaded 2 files" in data.summary()


def test_outputs_naming_a_whole_bucket_start_at_the_job(client, tmp_path):
    data = attempt_data(tmp_path, outputs="gs://out-bkt", job_id="j9")
    (data.output_dir / "r.txt").write_text("done")

    data.upload()

    assert objects(client, "out-bkt") == {"j9/attempt-1/r.txt": b"done"}


@pytest.mark.parametrize("uri, reason", [
    ("gs://data-bkt/corpus/missing.txt", "no such object, and no object under it as a prefix"),
    ("gs://no-such-bkt/x", "The specified bucket does not exist: no-such-bkt"),
])
def test_a_missing_input_is_a_transfer_error_naming_the_uri(client, tmp_path, uri, reason):
    data = attempt_data(tmp_path, [uri])

    with pytest.raises(TransferError) as raised:
        data.stage()

    assert str(raised.value).startswith(f"input {uri}: ") and reason in str(raised.value)


def test_an_upload_to_a_missing_bucket_is_a_transfer_error_with_the_reason(client, tmp_path):
    data = attempt_data(tmp_path, outputs="gs://gone-bkt/out")
    (data.output_dir / "a.txt").write_text("a")

    with pytest.raises(TransferError) as raised:
        data.upload()

    assert str(raised.value) == ("upload of a.txt to gs://gone-bkt/out/j1/attempt-1/a.txt failed after 0 of 1 files: "
                                 "404 The specified bucket does not exist: gone-bkt")


def test_a_cancelled_download_stops_mid_object(client, tmp_path):
    client.bucket("data-bkt").blob("big").upload_from_string(b"x" * BIG)
    data = attempt_data(tmp_path, ["gs://data-bkt/big"])
    data.cancel.set()

    with pytest.raises(Cancelled):
        data._download(client.bucket("data-bkt").blob("big"), data.input_dir / "big")


# -- the agent loop: a real job, a fake Pub/Sub transport, the stand-in -----------------------------
def run_one(tmp_path, start) -> list[Heartbeat]:
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = confirm_claims(VM)
    transport.add_start(start)
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, lease_s=10,
                             vm_heartbeat_s=1000, work_dir=str(tmp_path / "work"))
    make_agent(transport, settings).run()
    return [m for m in transport.published if isinstance(m, Heartbeat)]


COPY_UPPER = ("import os, pathlib; i, o = os.environ['ZEN_INPUT_DIR'], os.environ['ZEN_OUTPUT_DIR']; "
              "pathlib.Path(o, 'upper.txt').write_text(pathlib.Path(i, 'words.txt').read_text().upper()); "
              "print('wrote', o)")


def test_the_agent_runs_the_job_on_its_inputs_and_uploads_its_outputs(client, tmp_path):
    reports = run_one(tmp_path, start_message(
        "up-1", command=[sys.executable, "-c", COPY_UPPER],
        inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")], outputs="gs://out-bkt/res"))

    final = reports[-1]
    assert final.status.value == "SUCCEEDED" and final.exit_code == 0
    assert objects(client, "out-bkt") == {"res/up-1/attempt-1/upper.txt": b"ALPHA BETA\n"}
    assert (final.staged_bytes, final.uploaded_bytes) == (11, 11) and final.staged_s >= 0 and final.uploaded_s >= 0
    assert "zen: staged 1 file, 11 B in" in final.message and "to gs://out-bkt/res/up-1/attempt-1/" in final.message
    assert any(r.status.value == "RUNNING" and (r.message or "").startswith("zen: staging inputs") for r in reports)
    # the attempt's directories are removed (the journal of final reports, emptied, stays)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [".cache", ".reports"]


def test_a_missing_input_fails_the_attempt_before_the_job_runs(client, tmp_path):
    marker = tmp_path / "ran"
    reports = run_one(tmp_path, start_message(
        "in-1", command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        inputs=[InputSpec(uri="gs://data-bkt/nothing/here")]))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code is None
    assert final.message.startswith("zen: input gs://data-bkt/nothing/here: no such object")
    assert not marker.exists()


def test_a_failed_upload_fails_an_attempt_that_exited_0(client, tmp_path):
    reports = run_one(tmp_path, start_message(
        "out-1", command=[sys.executable, "-c", COPY_UPPER],
        inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")], outputs="gs://gone-bkt/res"))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code == 0
    assert "zen: upload of upper.txt to gs://gone-bkt/res/out-1/attempt-1/upper.txt failed after 0 of 1 files: " \
           "404 The specified bucket does not exist: gone-bkt" in final.message
    assert final.uploaded_bytes == 0


def test_an_output_named_in_bytes_that_are_not_utf8_fails_the_attempt_with_a_final_report(client, tmp_path):
    """os.walk gives such a name as lone surrogates: the note quoting it failed the final report's
    validation, so none was sent and the directories stayed; the job was lost and rerun."""
    writes = ("import os; open(os.path.join(os.environb[b'ZEN_OUTPUT_DIR'], b'caf\\xe9.txt'), 'wb').write(b'x'); "
              "open(os.path.join(os.environ['ZEN_OUTPUT_DIR'], 'a.txt'), 'w').write('a')")
    reports = run_one(tmp_path, start_message("nu-1", command=[sys.executable, "-c", writes], outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert final.status.value == "FAILED" and final.exit_code == 0
    assert ("zen: Cloud Storage cannot name caf\\udce9.txt (its name is not UTF-8, as Cloud Storage's "
            "must be): not uploaded") in final.message
    assert objects(client, "out-bkt") == {"r/nu-1/attempt-1/a.txt": b"a"}
    # the attempt's directories are removed (the journal of final reports, emptied, stays)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [".cache", ".reports"]


def test_the_job_sees_both_directories_and_a_container_gets_them_mounted_at_the_same_path(tmp_path):
    from zen.agent.runner import JobSpec, docker_argv

    data = AttemptData("j1", 3, [], "gs://out-bkt/x", tmp_path / "work")
    spec = JobSpec("j1", 3, ["train"], image="img:1", env={"ZEN_OUTPUT_DIR": "/elsewhere"}, data_dirs=data.env())

    assert spec.job_env()["ZEN_OUTPUT_DIR"] == str(data.output_dir) == str(data.root / "outputs")  # the agent's wins
    argv = docker_argv(spec)
    assert ["-v", f"{data.input_dir}:{data.input_dir}:ro"] == argv[argv.index("-v"):argv.index("-v") + 2]
    assert ["-v", f"{data.output_dir}:{data.output_dir}"] == argv[argv.index("-v") + 2:argv.index("-v") + 4]


def test_two_jobs_whose_ids_differ_only_by_colon_and_dash_keep_their_own_outputs(client, tmp_path):
    """``exp:1`` and ``exp-1`` once shared one work directory (``:`` made ``-``): on a VM running both,
    the second's preparation wiped the first's, and each uploaded the other's file or none."""
    transport = FakeTransport(VM_SHARED, virtual_time=False)
    transport.answer = confirm_claims(VM_SHARED)
    writes = ("import os, pathlib, time; time.sleep(0.3); pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'result')"
              ".write_text(os.environ['ZEN_JOB_ID']); time.sleep(0.7)")
    for job_id in ("exp:1", "exp-1"):
        transport.add_start(start_message(job_id, cluster="8xa100-40gb", gpus=4, outputs="gs://out-bkt/r",
                                          command=[sys.executable, "-c", writes]))
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, lease_s=10,
                             vm_heartbeat_s=1000, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY_SHARED, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    transport.when_idle = lambda: agent.jobs_run >= 2 and agent.request_shutdown("test over")

    assert agent.run() == 0

    finals = {m.job_id: m.status.value for m in transport.published if isinstance(m, Heartbeat)
              and m.status.value not in ("CLAIMED", "RUNNING")}
    assert finals == {"exp:1": "SUCCEEDED", "exp-1": "SUCCEEDED"}
    assert objects(client, "out-bkt") == {"r/exp:1/attempt-1/result": b"exp:1", "r/exp-1/attempt-1/result": b"exp-1"}


def test_a_prefix_holding_only_folder_placeholders_fails_and_is_not_reported_warm(client, tmp_path):
    """The placeholders (``empty/``, ``empty/sub/``: what the Console's "create folder" makes) once counted
    as found: the job ran on an empty directory and the warm cache advertised the input as held."""
    from zen.agent.cache import InputCache

    bucket = client.bucket("data-bkt")
    bucket.blob("empty/").upload_from_string(b"")
    bucket.blob("empty/sub/").upload_from_string(b"")
    cache = InputCache(tmp_path / "cache", 10_000)
    data = AttemptData("j1", 1, [InputSpec(uri="gs://data-bkt/empty/")], None, tmp_path / "work", cache=cache)
    data.prepare()

    with pytest.raises(TransferError) as raised:
        data.stage()

    assert str(raised.value) == ("input gs://data-bkt/empty/: no such object, and no object under it as a prefix "
                                 "(only 2 folder placeholders)")
    assert cache.report() == (None, None)
