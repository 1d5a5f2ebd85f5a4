"""A job's stored message while it runs is its attempt's word now. As an attempt prepares its job, the agent's RUNNING
heartbeats say so (``zen: reading its secrets``, ``zen: staging inputs: ...``, ``zen: pulling ...``:
``zen.agent.prestart``); once the job's command runs they carry no message. Zen kept the last message it had, so
`zen jobs get` (and the console's "Progress") said a job running its command for hours was still staging its inputs.
A RUNNING heartbeat without a message clears the note: on the one-statement path (``record_progress``), on the full
one (a stopping job's VM that has not heard the STOP yet), and for a gang (rank 0's word). Real Postgres, the
functions, the ``zen`` command."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.cli.main import main

STAGING = "zen: staging inputs: 3 files, 1.2 GB so far"


def test_a_job_running_its_command_no_longer_says_it_is_staging(functions, zen, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("j"))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1))
    functions.heartbeat(heartbeat("j", "RUNNING", 2, message="zen: reading its secrets"))
    functions.heartbeat(heartbeat("j", "RUNNING", 3, message=STAGING))
    assert job(zen, "j").message == STAGING
    functions.heartbeat(heartbeat("j", "RUNNING", 4))  # its command runs: nothing to note
    record = job(zen, "j")
    assert (record.status.value, record.last_seq, record.message) == ("RUNNING", 4, None)
    capsys.readouterr()
    assert main(["jobs", "get", "j"]) == 0
    assert "staging" not in capsys.readouterr().out


def test_a_stopping_jobs_vm_running_its_command_clears_the_note(functions, zen):
    functions.submit(job_request("s"))
    functions.heartbeat(heartbeat("s", "CLAIMED", 1))
    functions.heartbeat(heartbeat("s", "RUNNING", 2, message="zen: pulling the job's image us-docker.pkg.dev/p/r/i"))
    functions.stop({"job_id": "s", "reason": "enough"})
    functions.heartbeat(heartbeat("s", "RUNNING", 3))  # sent before the STOP reached it: its command ran
    record = job(zen, "s")
    assert (record.status.value, record.last_seq, record.message) == ("STOPPING", 3, None)


def test_a_gang_running_its_command_no_longer_says_rank_0_is_pulling(functions, zen):
    functions.submit(job_request("g", nodes=2))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    functions.heartbeat(heartbeat("g", "RUNNING", 2, vm="vm-1", message="zen: pulling the job's image i: 2 GB"))
    functions.heartbeat(heartbeat("g", "RUNNING", 2, vm="vm-2"))
    assert job(zen, "g").message == "zen: pulling the job's image i: 2 GB"
    functions.heartbeat(heartbeat("g", "RUNNING", 3, vm="vm-1"))
    record = job(zen, "g")
    assert (record.status.value, record.message) == ("RUNNING", None)
