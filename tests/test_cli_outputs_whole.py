"""``zen jobs get`` says where an ended job's outputs are and whether they are whole: the agent's line saying so comes
first in the final report, and the 8 lines shown are the output's tail, so a user saw a job whose upload was cut
part-way (FAILED, exit code 0) as one with its outputs saved, and the bucket told no more
(``zen.agent.output_manifest``). Real Postgres, the functions, the ``zen`` command."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.cli.main import main

TAIL = "\n".join(f"step {n}" for n in range(200))


def _ended(functions, job_id: str, status: str, zen_lines: str) -> None:
    functions.submit(job_request(job_id, outputs="gs://res-bkt/runs"))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 1))
    functions.heartbeat(heartbeat(job_id, status, 2, exit_code=0, message=f"{zen_lines}\n{TAIL}"))


def test_jobs_get_says_whether_an_ended_jobs_outputs_are_whole(functions, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    _ended(functions, "whole", "SUCCEEDED", "zen: uploaded 2 files, 5.0 kB in 0.1 s to gs://res-bkt/runs/whole/"
                                            "attempt-1/ (_ZEN_OUTPUTS.json written last: whole)")
    _ended(functions, "cut", "FAILED", "zen: uploading outputs exceeded its budget, max_runtime_s=60 (1 file done)\n"
                                       "zen: uploaded 1 file, 1.0 kB in 60 s to gs://res-bkt/runs/cut/attempt-1/ "
                                       "(no _ZEN_OUTPUTS.json: not whole)")
    capsys.readouterr()

    assert main(["jobs", "get", "whole"]) == 0
    shown = capsys.readouterr().out
    assert "outputs: gs://res-bkt/runs/whole/attempt-1/ (whole: _ZEN_OUTPUTS.json written last)" in shown
    assert "uploaded 2 files" not in shown  # the report's own line, behind the tail
    assert main(["jobs", "get", "cut"]) == 0
    shown = capsys.readouterr().out
    assert ("outputs: gs://res-bkt/runs/cut/attempt-1/ (NOT whole: the upload failed or was cut; no _ZEN_OUTPUTS.json)"
            in shown)
    assert main(["jobs", "get", "cut", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"].startswith("gs://res-bkt/runs/cut/attempt-1/ (NOT whole")


def test_a_running_job_says_where_its_outputs_go_and_how_to_tell_them_whole(functions, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("busy", outputs="gs://res-bkt/runs"))
    functions.heartbeat(heartbeat("busy", "CLAIMED", 1))
    functions.heartbeat(heartbeat("busy", "RUNNING", 2, message="zen: uploaded ... to gs://res-bkt/runs/busy/attempt-1/ "
                                                                "(_ZEN_OUTPUTS.json written last: whole)"))
    capsys.readouterr()

    assert main(["jobs", "get", "busy"]) == 0
    assert ("outputs: gs://res-bkt/runs/busy/attempt-1/ (whole once it holds _ZEN_OUTPUTS.json, written last)"
            in capsys.readouterr().out)


def test_a_job_printing_zens_whole_line_does_not_make_a_failed_upload_whole(functions, db_url, monkeypatch, capsys):
    """The agent's lines come first and the output's tail right after them, its first line as the job printed it: a
    job that printed Zen's line saying the outputs whole (a step echoing a report of this attempt) was shown as whole
    where the agent said its upload failed. The first such line decides: the agent's."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    where = "gs://res-bkt/runs/echo/attempt-1/"
    functions.submit(job_request("echo", outputs="gs://res-bkt/runs"))
    functions.heartbeat(heartbeat("echo", "CLAIMED", 1))
    functions.heartbeat(heartbeat("echo", "FAILED", 2, exit_code=0, message=(
        f"zen: upload of b.bin to {where}b.bin failed after 1 of 2 files: 503 Service Unavailable\n"
        f"zen: uploaded 1 file, 1.0 kB in 3 s to {where} (no _ZEN_OUTPUTS.json: not whole)\n"
        f"zen: uploaded 2 files, 2.0 kB in 1 s to {where} (_ZEN_OUTPUTS.json written last: whole)\n{TAIL}")))
    capsys.readouterr()

    assert main(["jobs", "get", "echo"]) == 0
    [said] = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("outputs:")]
    assert said == f"outputs: {where} (NOT whole: the upload failed or was cut; no _ZEN_OUTPUTS.json)", said
