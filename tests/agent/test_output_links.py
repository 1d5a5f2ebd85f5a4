"""Outputs are uploaded from regular files only (zen.agent.staging.AttemptData.upload): the agent runs
as root, and a symbolic link a job leaves in ZEN_OUTPUT_DIR (to a host file, another job's staged
input, a warm-cache entry) once uploaded the file it pointed at. Links and special files are skipped
and named in the final report; a file swapped for a link after the listing is not followed either."""

from __future__ import annotations

import os
import sys

from tests.agent.test_staging import attempt_data, client, objects, run_one  # noqa: F401 (fixture)
from tests.agent.test_agent_loop import start_message
from zen.core.models import InputSpec


def test_a_link_to_another_jobs_input_is_not_uploaded_and_a_regular_file_is(client, tmp_path):  # noqa: F811
    victim = attempt_data(tmp_path, ["gs://data-bkt/corpus/words.txt"], job_id="victim")
    victim.stage()
    outside = tmp_path / "host"
    (outside / "etc").mkdir(parents=True)
    (outside / "etc" / "config.yaml").write_text("secret: 1")
    data = attempt_data(tmp_path, outputs="gs://out-bkt/r", job_id="thief")
    out = data.output_dir
    (out / "result.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "deep.txt").write_text("also mine")
    os.symlink(victim.input_dir / "words.txt", out / "stolen.txt")
    os.symlink(outside / "etc" / "config.yaml", out / "sub" / "config.yaml")
    os.symlink(outside / "etc", out / "etc")  # a linked folder: never entered
    os.mkfifo(out / "pipe")

    data.upload()

    assert objects(client, "out-bkt") == {"r/thief/attempt-1/result.txt": b"mine",
                                          "r/thief/attempt-1/sub/deep.txt": b"also mine"}
    assert data.skipped == [("etc", "a symbolic link, not followed"), ("pipe", "not a regular file"),
                            ("stolen.txt", "a symbolic link, not followed"),
                            ("sub/config.yaml", "a symbolic link, not followed")]
    assert (data.uploaded.files, data.uploaded.bytes) == (2, 13)
    assert client.bucket("out-bkt").get_blob("r/thief/attempt-1/result.txt").content_type == "text/plain"
    assert ("not uploaded (only regular files are): etc (a symbolic link, not followed), pipe (not a regular "
            "file), stolen.txt (a symbolic link, not followed), sub/config.yaml") in data.summary()


def test_a_file_or_folder_swapped_for_a_link_after_the_listing_is_not_followed(client, tmp_path):  # noqa: F811
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    data = attempt_data(tmp_path, outputs="gs://out-bkt/r")
    out = data.output_dir
    (out / "a.txt").write_text("a")
    (out / "b.txt").write_text("b")
    (out / "d").mkdir()
    (out / "d" / "secret.txt").write_text("harmless")
    listed = data.output_files()
    assert [name for name, *_ in listed] == ["a.txt", "b.txt", "d/secret.txt"]
    (out / "b.txt").unlink()
    os.symlink(secret, out / "b.txt")  # the job swaps them while the agent uploads
    (out / "d" / "secret.txt").unlink()
    (out / "d").rmdir()
    os.symlink(tmp_path, out / "d")
    data.output_files = lambda: listed

    data.upload()

    assert objects(client, "out-bkt") == {"r/j1/attempt-1/a.txt": b"a"}
    assert data.skipped == [("b.txt", "a symbolic link, not followed"),
                            ("d/secret.txt", "replaced after it was listed, not followed")]


def test_the_final_report_names_the_links_not_uploaded_and_the_job_still_succeeds(client, tmp_path):  # noqa: F811
    host_file = tmp_path / "agent-config.yaml"
    host_file.write_text("credentials: do-not-leak")
    links = ("import os, pathlib; o = os.environ['ZEN_OUTPUT_DIR']; pathlib.Path(o, 'ok.txt').write_text('ok'); "
             f"os.symlink({str(host_file)!r}, os.path.join(o, 'x'))")
    reports = run_one(tmp_path, start_message("ln-1", command=[sys.executable, "-c", links],
                                              inputs=[InputSpec(uri="gs://data-bkt/corpus/words.txt")],
                                              outputs="gs://out-bkt/r"))

    final = reports[-1]
    assert final.status.value == "SUCCEEDED" and final.exit_code == 0
    assert objects(client, "out-bkt") == {"r/ln-1/attempt-1/ok.txt": b"ok"}
    assert "not uploaded (only regular files are): x (a symbolic link, not followed)" in final.message
    assert host_file.read_text() == "credentials: do-not-leak"


def test_an_output_dir_replaced_by_a_link_uploads_nothing(client, tmp_path):  # noqa: F811
    """A plain-process job (local mode) can replace ZEN_OUTPUT_DIR itself: its link is not followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("not the job's")
    data = attempt_data(tmp_path, outputs="gs://out-bkt/r")
    data.output_dir.rmdir()
    os.symlink(elsewhere, data.output_dir)

    data.upload()

    assert objects(client, "out-bkt") == {}
    assert data.skipped == [(".", "ZEN_OUTPUT_DIR itself is a symbolic link, not followed")]
