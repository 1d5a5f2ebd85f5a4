"""`zen` as a user runs it (a subprocess, in a directory of their own), for each friction of issue 13:
refused jobs are refused before publishing, ids are unique, a mistyped job file or a one-string
command is an error, a stop says what it will do, and no command shows a traceback, starts a
database, or acts on --help.

The Pub/Sub stand-in and a real Postgres stand behind it; the published messages are read back
through the official client (``publisher.on``), and the function runs what the CLI sent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.messages import heartbeat, job_request
from tests.token_support import issuer  # noqa: F401  (fixture)

LOOPBACK_METADATA = {"GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9", "NO_GCE_CHECK": "True"}


@pytest.fixture
def zen_cli(config, publisher, db_url, tmp_path, cli_forks):
    """Run `zen ARGS` in an empty directory, pointed at this test's Pub/Sub project and database."""
    base = {**os.environ, "ZEN_PROJECT": config.project, "ZEN_DATABASE_URL": db_url, "USER": "alice",
            "HOME": str(tmp_path), **LOOPBACK_METADATA}

    def run(*argv: str, drop: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
        full = {k: v for k, v in {**base, **env}.items() if k not in drop}
        result = cli_forks.run("zen.cli.main", argv, full, tmp_path, 120)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    return run


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zen: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("flags, reason", [
    (["--cluster", "9xh100"], "unknown cluster '9xh100'; known clusters: 1xl4"),
    (["--gpu-type", "nvidia-h100-80gb", "--gpu-count", "8"], "no cluster has 8 or more nvidia-h100-80gb GPUs"),
    (["--cluster", "1xl4", "--region", "asia-east1"], "regions ['asia-east1'] are not used by cluster 1xl4"),
    (["--cluster", "1xl4", "--max-runtime", "99999999"], "max_runtime_s 99999999 is above the limit"),
])
def test_a_job_the_function_would_refuse_is_refused_before_publishing(zen_cli, publisher, flags, reason):
    result = zen_cli("submit", *flags, "--", "python", "train.py")
    assert result.returncode == 1 and result.stdout == ""
    assert reason in one_line(result) and "Zen would refuse this job" in result.stderr
    assert publisher.on("zen-job-submitted") == []


def test_each_submit_gets_a_unique_readable_id_that_the_function_accepts(zen_cli, publisher, functions, db):
    from zen.store import repository

    first = zen_cli("submit", "--cluster", "1xl4", "--label", "team=vision", "--", "python", "-c", "print(1)")
    second = zen_cli("submit", "--cluster", "1xl4", "--", "python", "-c", "print(1)")
    ids = [re.match(r"submitted (\S+) to cluster 1xl4", r.stdout).group(1) for r in (first, second)]
    assert all(re.fullmatch(r"alice-\d{8}-\d{6}-[a-z0-9]{8}", job_id) for job_id in ids) and ids[0] != ids[1]
    messages = publisher.on("zen-job-submitted")
    assert [json.loads(m.data)["job_id"] for m in messages] == ids
    for message in messages:
        functions.submit(json.loads(message.data))
    with db.transaction() as session:
        jobs = [repository.get_job(session, job_id) for job_id in ids]
    assert [(j.user_id, j.status.value, j.request["labels"]) for j in jobs] == [
        ("alice", "QUEUED", {"team": "vision"}), ("alice", "QUEUED", {})]


def test_ids_zen_makes_in_one_second_do_not_repeat():
    """Identical submits given one id are one job (the second a redelivery to Zen), and a script submitting a
    sweep draws many ids a second: 20,000 in one second repeated 120 times with 4 random characters."""
    from datetime import datetime, timezone

    from zen.cli.user import default_job_id

    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=timezone.utc)
    assert len({default_job_id("alice", now) for _ in range(20_000)}) == 20_000


def test_a_mistyped_job_file_is_an_error_not_a_command(zen_cli, publisher):
    result = zen_cli("submit", "--cluster", "1xl4", "jobs/tarin.yaml")
    assert result.returncode == 2 and "job file jobs/tarin.yaml does not exist" in one_line(result)
    assert publisher.on("zen-job-submitted") == []


def test_a_command_given_as_one_string_is_refused_with_a_hint(zen_cli, publisher):
    result = zen_cli("submit", "--cluster", "1xl4", "--", "python train.py")
    assert result.returncode == 2 and "-- python train.py" in one_line(result)
    assert publisher.on("zen-job-submitted") == []


def test_a_yaml_typo_names_the_field_in_one_line(zen_cli, publisher, tmp_path):
    (tmp_path / "job.yaml").write_text("clustr: 1xl4\ncommand: [python, train.py]\n")
    result = zen_cli("submit", "job.yaml")
    line = one_line(result)
    assert result.returncode == 2 and "job.yaml" in line and "clustr" in line
    assert publisher.on("zen-job-submitted") == []


@pytest.mark.parametrize("name, text", [
    ("job.yaml", "cluster: 1xl4\ncommand: [python, train.py]\nprovisioning: spot\nprovisioning: standard\n"),
    ("job.json", '{"cluster": "1xl4", "command": ["python"], "provisioning": "spot", "provisioning": "standard"}'),
])
def test_a_field_given_twice_in_a_job_file_is_refused_not_half_sent(zen_cli, publisher, tmp_path, name, text):
    (tmp_path / name).write_text(text)  # YAML and JSON parsers keep the last: the first was dropped unsaid
    result = zen_cli("submit", name)
    line = one_line(result)
    assert result.returncode == 2 and name in line and "provisioning" in line and "given twice" in line, line
    assert publisher.on("zen-job-submitted") == []


def test_a_stop_says_what_will_happen(zen_cli, publisher, functions):
    unknown = zen_cli("stop", "no-such-job")
    assert unknown.returncode == 1 and "no job no-such-job is known" in one_line(unknown)
    assert "7 days" in unknown.stderr and "--force" in unknown.stderr
    assert publisher.on("zen-job-stop") == []
    functions.submit(job_request("job-1"))
    running = zen_cli("stop", "job-1")
    assert running.returncode == 0 and "job job-1 is QUEUED: it is cancelled before it runs" in running.stdout
    forced = zen_cli("stop", "--force", "later-job")
    assert forced.returncode == 0 and "a job submitted with that id in that time is cancelled" in forced.stdout
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-stop")] == ["job-1", "later-job"]


def test_a_stop_zen_would_refuse_its_sender_is_not_sent(zen_cli, publisher, functions, issuer):
    """`ZEN_AS=bob zen stop` of alice's job said "it will be stopped" and exited 0; Zen refused it, which only
    `zen rejected` told. The CLI knows the job's owner and the sender its token names: it says so first."""
    from zen.core.config import GCLOUD_CLIENT_IDS

    functions.submit(job_request("job-a"))  # alice's
    token = issuer.user_token(email="bob@lab.example", audience=GCLOUD_CLIENT_IDS[0], now=time.time())
    refused = zen_cli("stop", "job-a", ZEN_ID_TOKEN=token)
    assert refused.returncode == 1 and publisher.on("zen-job-stop") == []
    assert "Zen would refuse this stop: bob@lab.example may not stop job job-a, which is alice's" in one_line(refused)
    assert "--force" in refused.stderr
    mine = issuer.user_token(email="alice", audience=GCLOUD_CLIENT_IDS[0], now=time.time())
    assert zen_cli("stop", "job-a", ZEN_ID_TOKEN=mine).returncode == 0
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-stop")] == ["job-a"]
    garbage = zen_cli("submit", "--cluster", "1xl4", "--", "echo", "hi", ZEN_ID_TOKEN="garbage")  # was "submitted
    assert garbage.returncode == 2 and "ZEN_ID_TOKEN is not an ID token" in one_line(garbage)  # ... as  (ZEN_ID_TOKEN)"
    mailless = issuer.user_token(email="", audience="zen:whatever", now=time.time(), email_verified=None)  # no format=full
    refused = zen_cli("submit", "--cluster", "1xl4", "--", "echo", "hi", ZEN_ID_TOKEN=mailless)  # the same
    assert refused.returncode == 2 and "ZEN_ID_TOKEN names no e-mail" in one_line(refused)
    assert publisher.on("zen-job-submitted") == []


def test_a_stop_of_a_job_that_ended_is_not_sent(zen_cli, publisher, functions):
    """It was published all the same, and recorded as a refusal (a "forbidden" message in zen stats)."""
    functions.submit(job_request("done-1"))
    functions.stop({"job_id": "done-1"})  # CANCELLED
    ended = zen_cli("stop", "done-1")
    assert ended.returncode == 0 and "has already ended (CANCELLED)" in ended.stdout and "not sent" in ended.stdout
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-stop")] == []
    assert zen_cli("stop", "--force", "done-1").returncode == 0
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-stop")] == ["done-1"]


def test_read_commands_outside_a_stack_start_nothing(zen_cli, tmp_path):
    for argv in (["jobs", "list"], ["watch", "--once"], ["rejected"], ["explain"], ["jobs", "get", "x"]):
        result = zen_cli(*argv, drop=("ZEN_DATABASE_URL",))
        assert result.returncode == 1 and "no local stack is running in this directory" in one_line(result)
    assert not (tmp_path / ".zen").exists()


def test_an_unreachable_database_is_one_line(zen_cli, tmp_path):
    gone = f"postgresql://postgres@/zen?host={tmp_path}"
    result = zen_cli("jobs", "list", ZEN_DATABASE_URL=gone)
    assert result.returncode == 1 and "cannot reach the database" in one_line(result)


@pytest.fixture
def not_gce():
    """A metadata address that answers every request 404, as a machine off GCE has none: google-auth
    asks it once per search for Application Default Credentials. Yields the list of paths asked."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    asked: list[str] = []

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            asked.append(self.path)
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()


@pytest.mark.parametrize("argv", [["submit", "--cluster", "1xl4", "--image", "python:3.11", "--", "true"],
                                  ["stop", "--force", "some-job"]])
def test_a_publish_without_a_stack_or_credentials_is_one_line_after_one_search(zen_cli, not_gce, argv):
    """Off GCE each search for credentials costs google-auth seconds of pings: one is made, not one
    for the identity and another for the Pub/Sub client."""
    port, asked = not_gce
    metadata = f"127.0.0.1:{port}"
    result = zen_cli(*argv, drop=("PUBSUB_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "ZEN_DATABASE_URL"),
                     GCE_METADATA_HOST=metadata, GCE_METADATA_IP=metadata)
    assert result.returncode == 1 and "no Google credentials" in one_line(result)
    assert len(asked) == 1, asked


def test_a_job_without_an_image_is_refused_before_publishing_to_a_deployed_zen(zen_cli, publisher):
    """A deployed Zen's agents run jobs in containers only (zen.agent.runner.plan_launch): refused
    here, with the reason, rather than failing on a GPU VM booted for it."""
    result = zen_cli("submit", "--cluster", "1xl4", "--", "true", drop=("PUBSUB_EMULATOR_HOST",))
    assert result.returncode == 1 and "runs jobs in containers only" in one_line(result)
    assert publisher.on("zen-job-submitted") == []


def test_help_never_acts(zen_cli):
    for argv in (["local", "--help"], ["local", "down", "--help"], ["local", "up", "--help"], ["submit", "--help"],
                 ["jobs", "list", "--help"], ["--help"]):
        result = zen_cli(*argv)
        assert result.returncode == 0 and result.stdout.startswith("usage: zen"), (argv, result)
        assert "stopped" not in result.stdout and "no local stack" not in result.stdout
    # One that needs a database helps without one (it said "no database" instead).
    result = zen_cli("console", "--help", drop=("ZEN_DATABASE_URL",))
    assert result.returncode == 0 and result.stdout.startswith("usage: zen console"), result


def test_usage_errors_exit_2(zen_cli):
    assert zen_cli("jobs", "list", "--limit", "-3").returncode == 2
    assert zen_cli("jobs", "list", "--since", "yesterday").returncode == 2
    assert zen_cli("frobnicate").returncode == 2
    bare = zen_cli("jobs")  # said "required: jobs_command", the parser's own name
    assert bare.returncode == 2 and "required: {list,get,history}" in bare.stderr, bare.stderr


def test_a_closed_pipe_is_quiet(config, publisher, db_url, functions, tmp_path):
    functions.submit(job_request("job-1"))
    env = {**os.environ, "ZEN_DATABASE_URL": db_url, **LOOPBACK_METADATA}
    process = subprocess.Popen([sys.executable, "-m", "zen.cli.main", "jobs", "list", "--json"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # like `| head` that has read what it wanted before zen writes
    assert process.wait(timeout=120) in (0, 1)
    assert process.stderr.read() == b""


def test_the_readme_example_job_file_is_accepted(zen_cli, publisher):
    from tests.conftest import ROOT

    result = zen_cli("submit", str(ROOT / "examples" / "hello.yaml"))
    assert result.returncode == 0, result.stderr
    [message] = publisher.on("zen-job-submitted")
    assert json.loads(message.data)["labels"] == {"team": "vision"}


def test_a_failed_publish_names_the_job_and_how_to_try_again_without_a_second_job(monkeypatch, capsys):
    """The publish timed out (its answer may be lost while the message landed): the error did not say
    the generated id, so trying again made a new id, and maybe a second job."""
    from zen.cli import main as cli, user as usercli
    from zen.cli.kit import CliError

    def times_out(topic_field, payload, attributes=None):
        raise CliError("could not publish to projects/p/topics/zen-job-submitted: TimeoutError")

    monkeypatch.setattr(usercli, "publish", times_out)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")  # a local stack's (the job needs no image there)
    assert cli.main(["submit", "--cluster", "1xl4", "--", "true"]) == 1
    err = capsys.readouterr().err
    job_id = err.split("job ")[1].split(" ")[0]
    assert f"submit it again with --job-id {job_id}" in err and len(err.strip().splitlines()) == 1


def test_a_stop_goes_out_when_the_database_cannot_be_read(zen_cli, publisher, db, db_url, tmp_path):
    """`zen stop` checked the database before publishing and gave up when it could not read it: a
    runaway GPU job could not be stopped, even with --force. The check is advice; the stop is sent."""
    role = f"noread_{os.getpid()}"
    with db.session() as session:
        session.execute(f"DROP ROLE IF EXISTS {role}")
        session.execute(f"CREATE ROLE {role} LOGIN")
    try:
        no_grant = db_url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
        assert no_grant != db_url
        cases = {
            "gone": dict(ZEN_DATABASE_URL=f"postgresql://postgres@/zen?host={tmp_path}"),
            "no-user": dict(ZEN_CLOUDSQL_INSTANCE="p:us-central1:zen", drop=("ZEN_DATABASE_URL", "ZEN_DB_USER")),
            "no-grant": dict(ZEN_DATABASE_URL=no_grant),
        }
        for job_id, env in cases.items():
            for force in ((), ("--force",)):
                result = zen_cli("stop", *force, job_id, **env)
                assert result.returncode == 0, (job_id, result.stderr)
                assert f"stop requested for {job_id}" in result.stdout
                assert f"could not check whether job {job_id} exists" in result.stdout
        assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-stop")] == [
            "gone", "gone", "no-user", "no-user", "no-grant", "no-grant"]
    finally:
        with db.session() as session:
            session.execute(f"DROP ROLE IF EXISTS {role}")


def test_submit_wait_that_cannot_follow_publishes_nothing(zen_cli, publisher, tmp_path):
    """`zen submit --wait` published first and found out afterwards that it could not follow (exit 1):
    a script retrying on failure submitted a second job. It now fails before publishing."""
    logs = str(tmp_path / "joblogs")
    cases = [
        (dict(ZEN_JOB_LOGS_DIR=logs, drop=("ZEN_DATABASE_URL",)), "no database to read"),
        (dict(ZEN_JOB_LOGS_DIR=logs, ZEN_CLOUDSQL_INSTANCE="p:us-central1:zen",
              drop=("ZEN_DATABASE_URL", "ZEN_DB_USER")), "ZEN_DB_USER is not"),
        (dict(ZEN_JOB_LOGS_DIR=logs, ZEN_DATABASE_URL=f"postgresql://postgres@/zen?host={tmp_path}"),
         "cannot reach the database"),
        (dict(drop=("ZEN_JOB_LOGS_DIR", "ZEN_LOGGING_ENDPOINT", "GOOGLE_APPLICATION_CREDENTIALS")),
         "no Google credentials to read Cloud Logging"),
    ]
    for env, reason in cases:
        result = zen_cli("submit", "--wait", "--cluster", "1xl4", "--", "true", **env)
        line = one_line(result)
        assert result.returncode == 1 and result.stdout == "", result
        assert "cannot follow the job, so it was not published" in line and reason in line, line
    assert publisher.on("zen-job-submitted") == []


def test_submitting_an_existing_job_id_again_is_refused_before_publishing(zen_cli, publisher, functions, tmp_path):
    """A job file with a fixed job_id, submitted again: zen said "submitted" while the function took it
    for a duplicate and ran nothing, and --wait replayed the old job's output as if it were new."""
    functions.submit(job_request("fixed-id", user_id="alice", cluster="1xl4", command=["python", "train.py"]))
    spec = tmp_path / "job.yaml"
    spec.write_text("job_id: fixed-id\ncluster: 1xl4\ncommand: [python, train.py]\n")
    for wait in ((), ("--wait",)):
        result = zen_cli("submit", *wait, str(spec), ZEN_JOB_LOGS_DIR=str(tmp_path / "joblogs"))
        line = one_line(result)
        assert result.returncode == 1 and result.stdout == "", result
        assert "job fixed-id already exists (QUEUED): the same request runs nothing new; use a new job_id" in line
    # Another request under the same id: it said "the same request runs nothing new" too
    other = tmp_path / "other.yaml"
    other.write_text("job_id: fixed-id\ncluster: 1xl4\ncommand: [python, eval.py]\n")
    line = one_line(zen_cli("submit", str(other)))
    assert "job_id fixed-id is taken by another request (QUEUED; zen jobs get fixed-id): Zen would refuse" in line
    assert publisher.on("zen-job-submitted") == []
    # the database unreadable: published as before (the function decides)
    gone = zen_cli("submit", str(spec), ZEN_DATABASE_URL=f"postgresql://postgres@/zen?host={tmp_path}")
    assert gone.returncode == 0 and "submitted fixed-id" in gone.stdout, gone.stderr
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-submitted")] == ["fixed-id"]


def test_shape_flags_override_the_job_files_shape(zen_cli, publisher, tmp_path):
    """The README says flags override the file, but `zen submit examples/hello.yaml --gpu-type T --gpu-count N`
    was refused (exit 2: a cluster and a GPU type, not both): the file's cluster stayed."""
    from tests.conftest import ROOT

    hello = str(ROOT / "examples" / "hello.yaml")
    by_type = zen_cli("submit", hello, "--gpu-type", "nvidia-l4", "--gpu-count", "1")
    assert by_type.returncode == 0, by_type.stderr
    spec = tmp_path / "typed.yaml"
    spec.write_text("gpu_types: [nvidia-l4]\ngpu_count: 1\ncommand: [python, train.py]\n")
    by_cluster = zen_cli("submit", str(spec), "--cluster", "1xl4")
    assert by_cluster.returncode == 0, by_cluster.stderr
    first, second = (json.loads(m.data) for m in publisher.on("zen-job-submitted"))
    assert (first.get("cluster"), first["gpu_type"], first["gpu_count"]) == (None, "nvidia-l4", 1)
    assert first["labels"] == {"team": "vision"}  # the rest of the file stays
    assert (second["cluster"], second.get("gpu_types"), second.get("gpu_count")) == ("1xl4", None, None)


def test_a_command_with_its_own_flags_but_no_double_dash_is_told_where_it_goes(capsys):
    from zen.cli.main import main

    assert main(["submit", "--cluster", "1xl4", "python", "-c", "print(1)"]) == 2
    err = capsys.readouterr().err
    assert "a job's command goes after --: zen submit ... -- python -c 'print(1)'" in err


def test_a_second_submit_of_a_job_id_still_on_its_way_says_so(zen_cli, publisher, config, db_url, tmp_path):
    """Two quick `zen submit` of one job file with a fixed job_id both printed "submitted" while one job
    exists: the second ran before the function had written the first. Here no function runs, so the job
    never reaches the database: only the first submit may say "submitted"."""
    spec = tmp_path / "job.yaml"
    spec.write_text("job_id: twice-1\ncluster: 1xl4\ncommand: [python, train.py]\n")
    first = zen_cli("submit", str(spec))
    assert first.returncode == 0 and "submitted twice-1 to cluster 1xl4" in first.stdout, first.stderr
    assert "if job_id" not in first.stdout  # the database was read: the id was free
    second = zen_cli("submit", str(spec))
    line = one_line(second)
    assert second.returncode == 1 and second.stdout == "", second
    assert re.search(r"job twice-1 was published \d+ s ago by another `zen submit` \(message \S+\) \(not in the "
                     r"database yet\): the same request runs nothing new, one job runs", line), line
    other = tmp_path / "other.yaml"
    other.write_text("job_id: twice-1\ncluster: 1xl4\ncommand: [python, eval.py]\n")
    line = one_line(zen_cli("submit", str(other)))
    assert "with another request (not in the database yet): Zen would refuse one of the two" in line, line
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-submitted")] == ["twice-1"]
    # Two at once: one publishes, the other says the first is on its way
    spec.write_text("job_id: twice-2\ncluster: 1xl4\ncommand: [python, train.py]\n")
    env = {**os.environ, "ZEN_PROJECT": config.project, "ZEN_DATABASE_URL": db_url, "USER": "alice",
           "HOME": str(tmp_path), **LOOPBACK_METADATA}
    both = [subprocess.Popen([sys.executable, "-m", "zen.cli.main", "submit", str(spec)], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = sorted((p.wait(timeout=120), p.communicate()) for p in both)
    assert [code for code, _ in results] == [0, 1], results
    assert "submitted twice-2" in results[0][1][0] and "job twice-2" in results[1][1][1], results
    # Where the database cannot be read and nothing was published from here, the answer says what it assumes
    unread = zen_cli("submit", "--job-id", "twice-3", "--cluster", "1xl4", "--", "true",
                     ZEN_DATABASE_URL=f"postgresql://postgres@/zen?host={tmp_path}")
    assert unread.returncode == 0, unread.stderr
    assert "(if job_id twice-3 is new: the database could not be read to check)" in unread.stdout
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-submitted")] == ["twice-1", "twice-2", "twice-3"]


def test_zen_logs_says_why_a_job_has_no_output(zen_cli, functions, tmp_path):
    """It guessed "not started yet?" of every job without output: one that did not exist, and an attempt 2
    of a job that ran once."""
    (tmp_path / "joblogs").mkdir()
    logs = {"ZEN_JOB_LOGS_DIR": str(tmp_path / "joblogs")}
    functions.submit(job_request("waits-1"))
    waiting = zen_cli("logs", "waits-1", **logs)
    assert waiting.returncode == 1 and "it has not run yet (QUEUED; `zen explain waits-1`)" in one_line(waiting)
    second = zen_cli("logs", "waits-1", "--attempt", "2", **logs)
    assert second.returncode == 1 and "job waits-1 has had 1 attempt (QUEUED): no attempt 2" in one_line(second)
    # Requeued after its first attempt ran (and left no line): that one is not "not run yet", only the new one.
    for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
        functions.heartbeat(heartbeat("waits-1", status, seq))
    ran = zen_cli("logs", "waits-1", "--attempt", "1", **logs)
    assert ran.returncode == 1 and "not run yet" not in ran.stderr and "no output for job waits-1 attempt 1" in ran.stderr
    assert "not run yet" not in zen_cli("logs", "waits-1", **logs).stderr
    assert "attempt 2: it has not run yet (QUEUED" in zen_cli("logs", "waits-1", "--attempt", "2", **logs).stderr
    functions.submit(job_request("gone-1"))
    functions.stop({"job_id": "gone-1"})  # stopped while queued: it never will run ("not run yet" said it might)
    gone = zen_cli("logs", "gone-1", **logs)
    assert gone.returncode == 1 and "no output for job gone-1: it ended before it ran (CANCELLED" in one_line(gone)


def test_every_error_is_one_line_with_one_prefix(zen_cli, tmp_path):
    """Errors said "zen: ...", "zen logs: ...", "zen submit --wait: ...", "no job X" with no prefix, and
    argparse's usage block with "zen jobs list: error: ...": now one line, "zen: ...", whichever command."""
    (tmp_path / "joblogs").mkdir()
    cases = {
        ("jobs", "list", "--status", "nope"): (2, "zen: jobs list: argument --status: invalid choice: 'NOPE'"),
        ("frobnicate",): (2, "zen: argument COMMAND: invalid choice: 'frobnicate'"),
        ("stats", "--window", "-5"): (2, "zen: stats: argument --window: '-5' is not a number above 0"),
        ("submit", "--cluster", "1xl4", "python", "-c", "x"): (2, "zen: submit: unrecognized arguments: -c x"),
        ("jobs", "get", "nope"): (1, "zen: no job nope"),
        ("jobs", "history", "nope"): (1, "zen: no job nope"),
        ("explain", "nope"): (1, "zen: no job, array or cluster named nope"),
        ("logs", "nope"): (1, "zen: no job nope (check the id with `zen jobs list`)"),  # was "not started yet?"
    }
    for argv, (code, start) in cases.items():
        result = zen_cli(*argv, ZEN_JOB_LOGS_DIR=str(tmp_path / "joblogs"))
        assert result.returncode == code and one_line(result).startswith(start), (argv, result.stderr)
        assert "usage:" not in result.stderr


def test_a_job_whose_submission_was_refused_says_why_where_its_id_is_asked_for(zen_cli, functions, tmp_path):
    """A job published from code and refused has no row: `zen jobs get`, `history`, `explain` and `logs` said only
    "no job X" (check the id), and `zen rejected` listed every sender's refusals. Each says Zen's refusal of it now,
    and `zen rejected --job X` lists that id's alone."""
    functions.submit(job_request("refused-1", cluster="9xh100"))  # from code: no CLI check before it went
    functions.submit(job_request("refused-2", cluster="7xa100"))
    (tmp_path / "joblogs").mkdir()
    for argv in (("jobs", "get", "refused-1"), ("jobs", "history", "refused-1"), ("explain", "refused-1"),
                 ("logs", "refused-1")):
        said = one_line(zen_cli(*argv, ZEN_JOB_LOGS_DIR=str(tmp_path / "joblogs")))
        assert said.startswith("zen: no job refused-1: Zen refused a message for it at "), (argv, said)
        assert "unknown cluster '9xh100'" in said and said.endswith("(`zen rejected --job refused-1`)"), (argv, said)
    listed = zen_cli("rejected", "--job", "refused-1", "--json")
    assert listed.returncode == 0
    assert [(r["job_id"], "9xh100" in r["reason"]) for r in json.loads(listed.stdout)] == [("refused-1", True)]
    assert {r["job_id"] for r in json.loads(zen_cli("rejected", "--json").stdout)} == {"refused-1", "refused-2"}
    assert one_line(zen_cli("jobs", "get", "never-sent")) == "zen: no job never-sent (`zen jobs list` lists them)"


# A job file whose `command` is mistyped (`comand:`, `cmd:`) was refused "nothing to run: give a job file, ..."
# although a job file was given: the unknown field, what is wrong, went unsaid.
@pytest.mark.parametrize("typo", ["comand", "cmd"])
def test_a_mistyped_command_field_is_named_not_called_nothing_to_run(zen_cli, publisher, tmp_path, typo):
    (tmp_path / "job.yaml").write_text(f"cluster: 1xl4\n{typo}: [python, train.py]\n")
    result = zen_cli("submit", "job.yaml")
    line = one_line(result)
    assert result.returncode == 2
    assert publisher.on("zen-job-submitted") == []
    assert "nothing to run: give a job file" not in line, line  # a job file was given
    assert typo in line and "job.yaml" in line, line  # the field that is wrong, in the file that has it


def test_a_submit_while_the_local_stack_starts_says_to_wait(zen_cli, publisher):
    """A stack's record names its identity endpoint (its Compute stand-in) before it listens: `zen submit` then
    said `zen: URLError: <urlopen error [Errno 111] Connection refused>`."""
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    said = zen_cli("submit", "--cluster", "1xl4", "--", "true",
                   ZEN_IDENTITY_ENDPOINT=f"http://127.0.0.1:{port}/zen-local/identity")
    assert said.returncode == 1 and "still starting" in one_line(said) and "URLError" not in said.stderr, said.stderr


def test_a_stop_right_after_the_submit_goes_out_before_the_database_shows_the_job(zen_cli, publisher, functions, db):
    """`zen submit` printed "stop: zen stop ID"; run at once, before the function had written the job, it said
    "no job ID is known: stop not sent" and the job ran. The submit records the id it published (a generated
    one too), so the stop goes out, Zen keeps it, and the job is cancelled when it arrives."""
    submitted = zen_cli("submit", "--cluster", "1xl4", "--", "true")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    stopped = zen_cli("stop", job_id)
    assert stopped.returncode == 0, stopped.stderr
    assert f"job {job_id} was published" in stopped.stdout and "not in the database yet" in stopped.stdout
    [stop] = publisher.on("zen-job-stop")
    functions.stop(stop.data, attributes=dict(stop.attributes))  # Pub/Sub keeps no order: the stop first
    [submit] = publisher.on("zen-job-submitted")
    functions.submit(submit.data, attributes=dict(submit.attributes))
    from zen.store import repository

    with db.transaction() as session:
        assert repository.get_job(session, job_id).status.value == "CANCELLED"
    assert zen_cli("stop", "never-published").returncode == 1  # an id this machine did not publish: as before


def test_a_submit_in_a_checkout_whose_stack_is_down_says_to_start_it(zen_cli, publisher):
    """No stack running here and no ZEN_PROJECT (a newcomer whose `zen local up` ended, or never ran): the line
    ended "give --image IMAGE", and with an image given the next one was about Google credentials."""
    result = zen_cli("submit", "--cluster", "1xl4", "--", "true", drop=("PUBSUB_EMULATOR_HOST", "ZEN_PROJECT"))
    line = one_line(result)
    assert result.returncode == 1 and line.startswith("zen: no local stack is running in this directory or above it: "
                                                      "start one with `zen local up`"), line
    assert publisher.on("zen-job-submitted") == []


@pytest.mark.parametrize("argv, meant", [(["submit", "--clustr", "1xl4", "--", "true"], "--cluster"),
                                         (["submit", "--max-paralel", "2", "--array", "2", "--", "true"], "--max-parallel"),
                                         (["jobs", "list", "--usr", "bob"], "--user")])
def test_a_mistyped_flag_is_told_the_flag_it_is_closest_to(zen_cli, argv, meant):
    """As a job file's mistyped field is ("did you mean command?"): the line named the word alone."""
    result = zen_cli(*argv)
    assert result.returncode == 2 and f"(did you mean {meant}?)" in one_line(result)
