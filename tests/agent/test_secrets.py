"""A job's secrets on the VM: real agents against the real scheduler (see conftest.py) and the Secret
Manager stand-in, read through the official client. The value reaches the job's environment, never its
captured output (masked), the agent's log or Postgres; a reference the VM may not read fails the attempt
before the job runs, with the reason; an unavailable service is tried again, then the attempt is requeued."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import grpc
import pytest

from tests.agent.conftest import DEADLINES
from tests.agent.helpers import job_command
from zen.adapters.secret_manager import secret_client, secret_reader
from zen.agent.output import AttemptOutput, OutputLimits
from zen.agent.runner import JobSpec, RunningJob, docker_argv, plan_launch
from zen.agent.secrets import BUDGET_S, SecretsFailed, resolve
from zen.core.config import load_config
from zen.core.models import AgentStatus
from zen_dev.local.secret_manager import SecretManagerStandIn, SecretStore

TOKEN = "hf_s3cr3t-value-0123456789"
HF = "projects/my-project/secrets/hf-token/versions/latest"
DENIED = "projects/my-project/secrets/db-password/versions/1"


@pytest.fixture
def config(project):
    """The agent tests' configuration, allowing the project's secrets (without queues: the top-level rule)."""
    return load_config().model_copy(update={"project": project, "deadlines": DEADLINES,
                                            "secrets": ["projects/my-project/secrets/*/versions/*"]})


@pytest.fixture
def secret_manager():
    store = SecretStore({"projects/my-project/secrets/hf-token": TOKEN,
                         "projects/my-project/secrets/db-password": "hunter2-password"},
                        granted=["projects/my-project/secrets/hf-*"])
    with SecretManagerStandIn(store) as standin:
        yield standin


def where_in_postgres(db, value: str) -> list[str]:
    """The tables of the job's database any of whose rows holds ``value``, in any column. (Table names come
    from the catalog: the one statement here built from text, in a test.)"""
    with db.transaction() as session:
        tables = [row["table_name"] for row in session.sql(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
        return [table for table in tables if session.sql(
            f'SELECT 1 AS found FROM "{table}" AS row WHERE strpos(row::text, :value) > 0 LIMIT 1', value=value)]


def test_the_secret_reaches_the_job_and_nothing_else(scheduler, agents, secret_manager, db, tmp_path):
    logs = tmp_path / "joblogs"
    agent = agents.start("vm-a", ZEN_SECRETS_ENDPOINT=secret_manager.endpoint, ZEN_JOB_LOGS_DIR=str(logs))
    scheduler.submit("sec-1", job_command("--print-env", "HF_TOKEN", "--print", "done"), secrets={"HF_TOKEN": HF})

    job = scheduler.wait_status("sec-1", "SUCCEEDED")

    assert "\nHF_TOKEN=***\n" in job.message  # the job had it, its output hides it
    assert TOKEN not in job.message
    shipped = "\n".join(path.read_text() for path in logs.rglob("*") if path.is_file())
    assert "HF_TOKEN=***" in shipped and TOKEN not in shipped
    assert TOKEN not in agent.log_path.read_text()
    assert where_in_postgres(db, HF) != [] and where_in_postgres(db, TOKEN) == []  # the reference only
    assert secret_manager.store.calls == [HF]  # read once, by the agent


def test_a_reference_the_vm_may_not_read_fails_the_attempt_before_the_job_runs(scheduler, agents, secret_manager,
                                                                                  tmp_path):
    ran = tmp_path / "ran"
    agents.start("vm-a", ZEN_SECRETS_ENDPOINT=secret_manager.endpoint)
    scheduler.submit("sec-2", job_command("--append", str(ran), "sec-2"), secrets={"HF_TOKEN": HF, "DB": DENIED})

    job = scheduler.wait_status("sec-2", "FAILED")

    assert not ran.exists()  # nothing of the job ran
    assert (f"zen: secret DB: {DENIED}: permission denied (the VM's service account needs "
            "roles/secretmanager.secretAccessor on it)") in job.message
    assert job.attempt == 1 and job.exit_code is None


# -- the reads, through the official client, with the service failing ---------------------------------------
class FakeTime:
    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_an_unavailable_service_is_tried_again_with_backoff(secret_manager):
    secret_manager.store.fail_next(grpc.StatusCode.UNAVAILABLE, 2)
    time = FakeTime()

    values = resolve({"HF_TOKEN": HF}, secret_reader(lambda location: secret_client(secret_manager.endpoint, location)),
                     clock=time.clock, sleep=time.sleep)

    assert values == {"HF_TOKEN": TOKEN} and time.slept == [1.0, 2.0]


def test_a_service_unavailable_past_the_budget_requeues_the_attempt_naming_the_secret(secret_manager):
    secret_manager.store.fail_next(grpc.StatusCode.UNAVAILABLE, 100)
    time = FakeTime()

    with pytest.raises(SecretsFailed) as failed:
        resolve({"HF_TOKEN": HF}, secret_reader(lambda location: secret_client(secret_manager.endpoint, location)),
                clock=time.clock, sleep=time.sleep)

    assert failed.value.status is AgentStatus.PREEMPTED and sum(time.slept) < BUDGET_S
    assert failed.value.note == f"zen: secret HF_TOKEN: {HF}: Secret Manager unavailable: injected failure (requeued)"


@pytest.mark.parametrize("name, reason", [
    ("projects/my-project/secrets/hf-gone/versions/latest", "not found (no such secret or version)"),
    ("projects/my-project/secrets/hf-token/versions/7", "not found (no such secret or version)"),
    ("projects/p/secrets/x/versions/1", "not a secret version reference"),  # a start from elsewhere
])
def test_a_reference_that_cannot_be_read_fails_with_the_reason(secret_manager, name, reason):
    with pytest.raises(SecretsFailed) as failed:
        resolve({"T": name}, secret_reader(lambda location: secret_client(secret_manager.endpoint, location)))
    assert failed.value.status is AgentStatus.FAILED and failed.value.note == f"zen: secret T: {name}: {reason}"


def test_a_value_an_environment_variable_cannot_hold_fails_the_attempt(secret_manager):
    secret_manager.store.put("projects/my-project/secrets/hf-binary", "a\0b")
    with pytest.raises(SecretsFailed, match="its value is not UTF-8 text without NUL characters") as failed:
        resolve({"T": "projects/my-project/secrets/hf-binary/versions/latest"},
                secret_reader(lambda location: secret_client(secret_manager.endpoint, location)))
    assert failed.value.status is AgentStatus.FAILED


# -- containers: by name on docker's command line, the value in the docker CLI's environment ---------------
def test_a_containers_secret_is_never_on_the_docker_command_line(tmp_path):
    record = tmp_path / "docker.jsonl"  # each call of the docker CLI: its argv and the HF_TOKEN it was given
    docker = tmp_path / "docker"
    docker.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"print(json.dumps({{'argv': sys.argv[1:], 'HF_TOKEN': os.environ.get('HF_TOKEN')}}), file=open({str(record)!r}, 'a'))\n")
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    spec = JobSpec(job_id="j", attempt=1, image="ubuntu", command=["sh"], env={"A": "b"},
                   secret_env={"HF_TOKEN": TOKEN})

    argv = docker_argv(spec)
    job = RunningJob.start(spec, local=False, docker=str(docker))
    job.outcome()

    assert argv[argv.index("HF_TOKEN") - 1] == "-e" and "A=b" in argv and not any(TOKEN in arg for arg in argv)
    assert plan_launch(spec, local=False).env == {"HF_TOKEN": TOKEN}
    [seen] = [call for line in record.read_text().splitlines() if (call := json.loads(line))["argv"][0] == "run"]
    assert seen["HF_TOKEN"] == TOKEN and not any(TOKEN in arg for arg in seen["argv"])
    assert TOKEN not in repr(spec)


def test_a_plain_process_has_its_secrets_in_its_environment_and_its_data_directories_win():
    spec = JobSpec(job_id="j", attempt=1, command=["true"], data_dirs={"ZEN_INPUT_DIR": "/in"},
                   secret_env={"HF_TOKEN": TOKEN, "ZEN_INPUT_DIR": "x"})
    assert spec.job_env()["HF_TOKEN"] == TOKEN and spec.job_env()["ZEN_INPUT_DIR"] == "/in"
    assert spec.container_secrets() == {"HF_TOKEN": TOKEN} and "HF_TOKEN" not in spec.job_env(container=True)


# -- masking -------------------------------------------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.written: list = []

    def write(self, batch) -> None:
        self.written += batch


def test_each_value_of_four_characters_or_more_is_masked_in_every_line_shipped_and_the_tail():
    sink = Sink()
    output = AttemptOutput("j", 1, "vm", sink, OutputLimits(flush_s=0.05))
    output.hide(["abcd", "abcdef", "xyz"])

    output.add("stdout", "token abcdef, prefix abcd, short xyz")
    output.add("stderr", "again abcdefabcd")
    assert output.close(budget_s=5) == 0

    texts = [entry.text for entry in sink.written if entry.stream != "zen"]
    assert texts == ["token ***, prefix ***, short xyz", "again ******"]
    assert "abcd" not in output.recent_text()


def test_a_value_of_several_lines_is_masked_line_by_line():
    output = AttemptOutput("j", 1, "vm", None)
    output.hide(["-----BEGIN KEY-----\nMIIEvQIBADANBgkq\n-----END KEY-----\n"])
    for line in ("-----BEGIN KEY-----", "MIIEvQIBADANBgkq", "-----END KEY-----"):
        output.add("stdout", line)
    assert output.recent_text() == "***\n***\n***\n"


def test_the_environment_variable_is_documented():
    """``ZEN_SECRETS_ENDPOINT`` is what points the agent at the stand-in: the agent's reference names it."""
    text = (Path(__file__).parents[2] / "docs" / "reference" / "agent.md").read_text()
    assert "ZEN_SECRETS_ENDPOINT" in text
    assert os.environ.get("ZEN_SECRETS_ENDPOINT") is None  # the tests point each agent at their own
