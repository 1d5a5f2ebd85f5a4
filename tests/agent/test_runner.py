"""The runner: argv (process or docker, never a shell), process group, output tail, exit codes, stop."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import re
import shutil
import time

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import alive, job_command, read_pid, wait_for
from zen.agent.output import AttemptOutput
from zen.agent.removal import NOT_REMOVING, ContainersLeft, remove_leftover_containers
from zen.agent.runner import (
    CannotRun, JobSpec, RunningJob, attempt_name, container_name, docker_argv, plan_launch, remove_image,
)
from zen.adapters.joblogs import LocalReader, LocalSink


def run(spec: JobSpec, **kwargs) -> RunningJob:
    return RunningJob.start(spec, local=kwargs.pop("local", True), **kwargs)


# -- argv ----------------------------------------------------------------------------------------
def test_docker_argv_passes_image_command_and_env_as_separate_arguments():
    spec = JobSpec(job_id="train-42", attempt=2, image="us-docker.pkg.dev/p/r/train:1",
                   command=["python", "train.py", "--name", "$USER; rm -rf /"], env={"WANDB_MODE": "offline",
                                                                                      "NOTE": "a b=c"},
                   data_dirs={"ZEN_SCRATCH_DIR": (scratch := "/work/zen-train-42-2/scratch")})  # every attempt's
    assert docker_argv(spec) == [
        "docker", "run", "--gpus", "all", "--name", container_name("train-42", 2),
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--log-driver", "none", "--read-only",
        "--oom-score-adj", "500",
        "--tmpfs", "/tmp:rw,exec,nosuid,nodev,mode=1777", "--user", "65534:65534", "-e", f"HOME={scratch}",
        "--network", "zen-net", "-v", f"{scratch}:{scratch}",
        "-e", "ZEN_JOB_ID=train-42", "-e", "ZEN_JOB_ATTEMPT=2", "-e", "WANDB_MODE=offline", "-e", "NOTE=a b=c",
        "-e", f"ZEN_SCRATCH_DIR={scratch}",
        "--", "us-docker.pkg.dev/p/r/train:1", "python", "train.py", "--name", "$USER; rm -rf /",
    ]


@pytest.mark.parametrize("image", ["--privileged", "--volume=/:/host", "-v"])
def test_an_image_is_never_read_as_an_option_of_docker_run(image):
    """Submissions refuse such images (zen.core.images), but a start message is the agent's only input:
    an image after ``--`` is docker's image whatever it says, and one starting with '-' is not run."""
    spec = JobSpec(job_id="j", attempt=1, image="img:1", command=["sh"])
    argv = docker_argv(spec)
    assert argv[argv.index("--") + 1:] == ["img:1", "sh"]
    with pytest.raises(CannotRun, match="starts with '-'"):
        docker_argv(JobSpec(job_id="j", attempt=1, image=image, command=["ubuntu", "sh"]))


def test_docker_argv_without_command_runs_the_image_default():
    argv = docker_argv(JobSpec(job_id="j", attempt=1, image="img:1"), docker="/usr/bin/docker")
    assert argv[0] == "/usr/bin/docker" and argv[-1] == "img:1"


def test_container_names_only_use_characters_docker_accepts_and_are_one_per_attempt():
    """``exp:1`` and ``exp-1`` once shared a name (and a work directory): ``docker run --name`` refused
    the second on a VM running both, and ``docker kill`` could hit the wrong job."""
    name = container_name("team:job/1 x", 3)
    assert re.fullmatch(r"zen-team-job-1-x-[0-9a-f]{12}-3", name)
    names = {container_name(job_id, attempt) for job_id, attempt in (
        ("exp:1", 1), ("exp-1", 1), ("exp-1", 2), ("x" * 128, 1), ("x" * 127 + "y", 1))}
    assert len(names) == 5
    assert all(re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+", n) and len(n) <= 4 + 64 + 14 + 10 for n in names)
    assert attempt_name("exp:1", 1) == container_name("exp:1", 1).removeprefix("zen-")  # its work directory too


def test_local_mode_ignores_the_image_and_runs_the_command():
    spec = JobSpec(job_id="j", attempt=1, image="img:1", command=["echo", "hi"])
    local = plan_launch(spec, local=True)
    remote = plan_launch(spec, local=False)
    assert local.argv == ["echo", "hi"] and local.container is None and local.env["ZEN_JOB_ID"] == "j"
    # docker by the full path the agent's PATH gives (the launcher runs with the job's secrets in its environment)
    assert remote.argv[0] in ("docker", shutil.which("docker")) and remote.argv[1] == "run"
    assert remote.container == container_name("j", 1) and remote.env == {}


@pytest.mark.parametrize("spec, local, reason", [
    (JobSpec(job_id="j", attempt=1, image="img:1"), True, "local mode runs no containers"),
    (JobSpec(job_id="j", attempt=1), True, "no command"),
    (JobSpec(job_id="j", attempt=1), False, "the job has no image"),
])
def test_a_job_that_cannot_run_here_says_why(spec, local, reason):
    with pytest.raises(CannotRun, match=reason):
        plan_launch(spec, local=local)


# -- processes -----------------------------------------------------------------------------------
def test_exit_code_output_tail_and_environment_without_a_shell():
    probe = "import os, sys; print(sys.argv[1:]); print(os.environ['ZEN_JOB_ID'], os.environ['GREETING'])"
    job = run(JobSpec(job_id="probe", attempt=1, command=[sys.executable, "-c", probe, "$HOME; echo hi", "*"],
                      env={"GREETING": "hello there"}))
    outcome = job.outcome()
    assert outcome.exit_code == 0
    assert outcome.tail == "['$HOME; echo hi', '*']\nprobe hello there\n"


def test_a_failing_command_reports_its_exit_code_and_output():
    outcome = run(JobSpec(job_id="f", attempt=1, command=job_command("--print", "boom", "--exit", "3"))).outcome()
    assert outcome.exit_code == 3 and "boom" in outcome.tail


def test_only_the_tail_of_a_long_output_is_kept():
    outcome = run(JobSpec(job_id="big", attempt=1, command=job_command("--bytes", "200000", "--print", "LAST")),
                  tail_bytes=4096).outcome()
    assert len(outcome.tail.encode()) <= 4096
    assert outcome.tail.endswith("LAST\nattempt=1\nexiting with 0\n")


def test_full_output_goes_to_the_output_sink_labelled_by_stream(tmp_path):
    output = AttemptOutput("logged", 2, "vm-x", LocalSink(tmp_path), recent_bytes=100)
    outcome = run(JobSpec(job_id="logged", attempt=2, command=job_command("--bytes", "10000", "--err", "oops")),
                  output=output).outcome()
    output.close("done")
    entries = LocalReader(tmp_path).new_entries("logged")
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert [e.text for e in entries if e.stream == "stdout"] == ["x" * 99] * 100 + ["attempt=2", "exiting with 0"]
    assert [e.text for e in entries if e.stream == "stderr"] == ["oops"]
    assert entries[-1].final and entries[-1].stream == "zen" and {e.vm for e in entries} == {"vm-x"}
    assert len(outcome.tail.encode()) <= 100


def test_a_missing_program_exits_127_with_a_message():
    outcome = run(JobSpec(job_id="nf", attempt=1, command=["/nonexistent/program", "x"])).outcome()
    assert outcome.exit_code == 127 and "command not found: /nonexistent/program" in outcome.tail


def test_stop_terminates_the_whole_process_group(tmp_path):
    job = run(JobSpec(job_id="s", attempt=1, command=job_command(
        "--pidfile", str(tmp_path / "pid"), "--child-pidfile", str(tmp_path / "child"), "--sleep", "60")))
    pid, child = read_pid(tmp_path / "pid"), read_pid(tmp_path / "child")
    began = time.monotonic()
    assert job.stop(grace_s=5) == 128 + signal.SIGTERM
    assert time.monotonic() - began < 2
    job.outcome()
    assert not alive(pid) and wait_for(lambda: not alive(child), 5, what="child gone")


def test_stop_kills_a_job_that_ignores_sigterm_after_the_grace_period(tmp_path):
    job = run(JobSpec(job_id="stubborn", attempt=1, command=job_command(
        "--ignore-term", "--pidfile", str(tmp_path / "pid"), "--sleep", "60")))
    pid = read_pid(tmp_path / "pid")
    began = time.monotonic()
    assert job.stop(grace_s=0.5) == 128 + signal.SIGKILL
    assert 0.5 <= time.monotonic() - began < 3
    assert not alive(pid)


def test_children_left_behind_are_killed_when_the_job_ends(tmp_path):
    outcome = run(JobSpec(job_id="leaky", attempt=1, command=job_command(
        "--child-pidfile", str(tmp_path / "child")))).outcome()
    assert outcome.exit_code == 0
    child = read_pid(tmp_path / "child")
    wait_for(lambda: not alive(child), 5, what="leftover child gone")


def test_max_runtime_is_measured_from_the_start():
    job = run(JobSpec(job_id="t", attempt=1, command=job_command("--sleep", "30"), max_runtime_s=1))
    assert not job.over_time()
    wait_for(job.over_time, 3, what="over time")
    assert job.stop(grace_s=2) == 128 + signal.SIGTERM


def test_a_job_dies_with_an_agent_that_is_killed_outright(tmp_path):
    """The launch shim's parent-death signal: no job outlives its agent."""
    agent = textwrap.dedent(f"""
        import sys, time
        from zen.agent.runner import JobSpec, RunningJob
        job = RunningJob.start(JobSpec(job_id="orphan", attempt=1, command={job_command('--sleep', '60')!r}),
                               local=True)
        print(job.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert alive(pid)
        parent.kill()
        parent.wait(10)
        wait_for(lambda: not alive(pid), 5, what="job gone with its agent")
    finally:
        parent.kill()
        parent.wait(10)


# -- containers, with a fake docker CLI ------------------------------------------------------------
@pytest.fixture
def fake_docker(tmp_path):
    """A stand-in docker CLI (``tests.agent.fakedocker``: ``run`` ignores SIGTERM until ``kill``): its path,
    and the argv of its calls so far."""
    fake = FakeDocker(tmp_path)
    return fake.path, fake.calls


def test_stopping_a_container_escalates_to_docker_kill(fake_docker):
    docker, calls = fake_docker
    job = RunningJob.start(JobSpec(job_id="gpu", attempt=1, image="img:1", command=["train"]), local=False,
                           docker=docker)
    wait_for(lambda: calls(), 5, what="docker run called")
    assert calls()[0][:6] == ["run", "--gpus", "all", "--name", container_name("gpu", 1), "--cap-drop"]
    assert job.stop(grace_s=0.3) in (137, 128 + signal.SIGKILL)
    assert ["kill", container_name("gpu", 1)] in calls()


def test_leftover_zen_containers_are_removed_at_start(tmp_path):
    docker = FakeDocker(tmp_path)
    for name, container_id in (("zen-a-1", "c1"), ("zen-b-2", "c2"), ("other", "c3")):
        docker.add(name, container_id)
    assert remove_leftover_containers(docker.path) == ["c1", "c2"]
    assert docker.names() == ["other"]
    listing = ["ps", "-aq", "--filter", "name=^zen-", *NOT_REMOVING]  # one docker is removing is as good as gone
    assert docker.calls() == [listing, ["rm", "-f", "-v", "c1", "c2"], listing]  # and checked gone


def test_leftovers_docker_cannot_list_or_remove_are_said_to_be_left(tmp_path, monkeypatch):
    """Without docker, or with one failing, they may run on: the agent retires its VM (``zen.agent.__main__``)."""
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    with pytest.raises(ContainersLeft, match="docker cannot list them"):
        remove_leftover_containers("/nonexistent/docker")
    docker = FakeDocker(tmp_path)
    docker.add("zen-a-1", "c1")
    docker.fail("rm")
    with pytest.raises(ContainersLeft, match=r"\(c1\)"):
        remove_leftover_containers(docker.path)
    assert [call[0] for call in docker.calls()] == ["ps", "rm", "ps", "rm", "ps", "rm", "ps"]  # REMOVE_TRIES


def test_the_job_inherits_the_agents_environment_in_local_mode(monkeypatch):
    monkeypatch.setenv("ZEN_TEST_MARKER", "from-agent")
    outcome = run(JobSpec(job_id="e", attempt=1, command=[
        sys.executable, "-c", "import os; print(os.environ.get('ZEN_TEST_MARKER'))"])).outcome()
    assert outcome.tail.strip() == "from-agent"
    assert os.environ["ZEN_TEST_MARKER"] == "from-agent"


def test_the_job_never_inherits_the_control_planes_secrets(monkeypatch):
    """A local stack's agents hold its database URL (a superuser's) and proof secret: a job must not."""
    for name in ("ZEN_DATABASE_URL", "ZEN_CLOUDSQL_INSTANCE", "ZEN_PROOF_SECRET"):
        monkeypatch.setenv(name, "secret")
    probe = "import os; print(sorted(k for k in os.environ if k in ('ZEN_DATABASE_URL', 'ZEN_CLOUDSQL_INSTANCE', 'ZEN_PROOF_SECRET')))"
    outcome = run(JobSpec(job_id="s", attempt=1, command=[sys.executable, "-c", probe])).outcome()
    assert outcome.tail.strip() == "[]"


def test_the_job_sees_its_id_attempt_and_stop_grace_in_its_environment():
    from zen.agent.runner import JobSpec

    env = JobSpec(job_id="j", attempt=2, command=["true"], env={"ZEN_PREEMPTED": "1"}, stop_grace_s=7.5).job_env()
    assert env == {"ZEN_JOB_ID": "j", "ZEN_JOB_ATTEMPT": "2", "ZEN_STOP_GRACE_S": "7.5", "ZEN_PREEMPTED": "1"}


def test_images_beyond_the_bound_are_removed_from_the_vm_least_recently_run_first(fake_docker, tmp_path):
    """Docker keeps every image it pulls: the agent keeps ``ZEN_AGENT_IMAGES_KEEP`` and removes the
    least recently run beyond it, through the docker CLI, in container mode only."""
    from tests.agent.fakes import FakeTransport
    from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM
    from zen.agent.agent import Agent
    from zen.core.models import VmState
    from zen.core.vm_heartbeat import VmHeartbeat

    docker, calls = fake_docker
    settings = dataclasses.replace(SETTINGS, docker=docker, images_keep=2, work_dir=str(tmp_path / "work"))
    transport = FakeTransport(VM)
    agent = Agent(IDENTITY, settings, transport, local=False, clock=transport.clock)
    for image in ("img-a@sha256:" + "a" * 64, "img-b:1", "img-a@sha256:" + "a" * 64, "img-c:2"):
        agent.cache.ran_image(image)
    wait_for(calls, 5, what="docker image rm (in the background)")
    assert calls() == [["image", "rm", "img-b:1"]]  # a ran again after b: b is the least recently run
    agent.vm_beats.beat(VmState.IDLE, force=True)
    [beat] = [m for m in transport.published if isinstance(m, VmHeartbeat)]
    assert beat.images == ["img-c:2", "img-a@sha256:" + "a" * 64]

    local = Agent(IDENTITY, settings, FakeTransport(VM), local=True, clock=transport.clock)
    for image in ("x:1", "y:1", "z:1"):
        local.cache.ran_image(image)
    assert calls() == [["image", "rm", "img-b:1"]]  # no docker in local mode: nothing removed


def test_an_image_removal_never_holds_up_the_job_that_evicted_it(tmp_path):
    """``docker image rm`` (up to 120 s) ran between a job's start and its supervision: no heartbeat,
    stop, runtime limit or shutdown meanwhile, and Zen's sweep could call the running job lost."""
    from tests.agent.fakes import FakeTransport, confirm_claims
    from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
    from zen.agent.agent import Agent
    from zen.core.models import Heartbeat

    removed = tmp_path / "removed"
    docker = tmp_path / "docker"  # run: a short job; image rm: slow
    docker.write_text(f"#!{sys.executable}\nimport pathlib, sys, time\n"
                      f"if sys.argv[1] == 'run': time.sleep(0.3)\n"
                      f"if sys.argv[1:3] == ['image', 'rm']: time.sleep(2); pathlib.Path({str(removed)!r}).touch()\n")
    docker.chmod(0o755)
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("img-1", image="img:1", command=["x"]))
    transport.add_start(start_message("img-2", image="img:2", command=["x"]))  # evicts img:1
    settings = dataclasses.replace(SETTINGS, docker=str(docker), images_keep=1, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    confirm, seen = confirm_claims(VM), {}

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.job_id == "img-2" and message.status.value == "RUNNING":
            seen.setdefault("removed when img-2 ran", removed.exists())
        return confirm(message)

    transport.answer = scheduler
    agent.run()

    assert seen == {"removed when img-2 ran": False}
    assert [r[2] for r in transport.job_reports() if r[0] == "img-2"][-1] == "SUCCEEDED"
    wait_for(removed.exists, 10, what="img:1 removed in the background")


def test_removing_an_image_is_best_effort():
    assert remove_image("img:1", "/nonexistent/docker") is False


def test_the_image_bound_is_checked_when_the_agent_starts():
    from zen.agent.settings import AgentSettings
    from zen.core.errors import ConfigError

    assert AgentSettings.from_env({"ZEN_AGENT_IMAGES_KEEP": "3"}).images_keep == 3
    with pytest.raises(ConfigError, match="ZEN_AGENT_IMAGES_KEEP must be at most 16"):
        AgentSettings.from_env({"ZEN_AGENT_IMAGES_KEEP": "40"})
    with pytest.raises(ConfigError, match="must be above 0"):
        AgentSettings.from_env({"ZEN_AGENT_IMAGES_KEEP": "0"})


def test_a_secret_named_as_what_starts_the_container_reads_is_not_run():
    """A secret's value is in the launcher's and the docker CLI's environment: one named PATH, LD_PRELOAD,
    PYTHONPATH or DOCKER_HOST would choose what they run. Refused at submission (zen.core.secrets); an agent
    refuses a start that has one all the same."""
    for name in ("PATH", "LD_PRELOAD", "PYTHONPATH", "DOCKER_HOST", "ZEN_INPUT_DIR", "CLOUDSDK_PYTHON", "BASH_ENV",
                 "HTTPS_PROXY", "REQUESTS_CA_BUNDLE", "GOOGLE_APPLICATION_CREDENTIALS", "OPENSSL_CONF", "HOSTALIASES"):
        spec = JobSpec(job_id="j", attempt=1, image="img:1", command=["true"], secret_env={name: "/tmp/x"})
        with pytest.raises(CannotRun, match=f"secrets named {name} would be set"):
            plan_launch(spec, local=False)
    spec = JobSpec(job_id="j", attempt=1, image="img:1", command=["true"], secret_env={"GOOGLE_API_KEY": "k"})
    assert plan_launch(spec, local=False).env == {"GOOGLE_API_KEY": "k"}  # none of them reads it: Gemini's SDKs do
