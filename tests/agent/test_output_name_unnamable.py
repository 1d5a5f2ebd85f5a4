"""An output file whose name Cloud Storage cannot hold (not UTF-8, a line break, an object's name past 1,024 bytes)
ended the upload where the listing reached it: the job that exited 0 FAILED for good, and every file after it in name
order (the model a training job wrote beside a stray log) was deleted with the work directory, never uploaded. Now
such a file is left out, the rest are uploaded, and the job still fails naming it: its outputs are not all there.
Real jobs, the Cloud Storage stand-in, the official client."""

from __future__ import annotations

import sys

import pytest

from tests.agent.test_agent_loop import start_message
from tests.agent.test_staging import attempt_data, client, objects, run_one  # noqa: F401 (fixture)
from zen.agent.staging import TransferError

WRITES = ("import os; o = os.environ['ZEN_OUTPUT_DIR']; "
          "open(os.path.join(os.fsencode(o), b'a-caf\\xe9.log'), 'wb').write(b'x'); "
          "open(os.path.join(o, 'model.bin'), 'wb').write(b'weights')")


def test_a_file_named_in_bytes_that_are_not_utf8_leaves_the_rest_uploaded_and_fails_the_job(client, tmp_path):  # noqa: F811
    reports = run_one(tmp_path, start_message("named", command=[sys.executable, "-c", WRITES], outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert objects(client, "out-bkt") == {"r/named/attempt-1/model.bin": b"weights"}, final.message
    assert (final.status.value, final.exit_code) == ("FAILED", 0)
    assert ("zen: Cloud Storage cannot name a-caf\\udce9.log (its name is not UTF-8, as Cloud Storage's must be): "
            "not uploaded") in final.message
    assert "uploaded 1 file, 7 B in " in final.message


@pytest.mark.parametrize("name, why", [
    ("a-line\nbreak.txt", "its name holds a line break, which Cloud Storage's may not"),
    ("/".join(letter * 210 for letter in "abcde"), "its object's name would be 1,071 bytes, past Cloud Storage's 1,024"),
])
def test_names_cloud_storage_refuses_are_left_out_and_said(client, tmp_path, name, why):  # noqa: F811
    data = attempt_data(tmp_path, outputs="gs://out-bkt/r", job_id="long")
    path = data.output_dir.joinpath(*name.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    (data.output_dir / "zz").mkdir()  # listed after it (os.walk: each folder's files, then its folders, by name)
    (data.output_dir / "zz" / "kept.txt").write_text("kept")

    with pytest.raises(TransferError) as raised:
        data.upload()

    assert objects(client, "out-bkt") == {"r/long/attempt-1/zz/kept.txt": b"kept"}
    assert str(raised.value).startswith("Cloud Storage cannot name a") and why in str(raised.value)
    assert str(raised.value).endswith("): not uploaded")
