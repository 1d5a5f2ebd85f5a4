"""A job that can only hurt itself (issue 34): a job's container runs as nobody, without capabilities,
on a read-only root filesystem, within its slot's share of the VM's memory, CPUs and tasks, on a
network no neighbour is on (``zen.agent.container``); jobs run as host processes only when
``ZEN_AGENT_LOCAL=1`` says so. Against a stand-in docker (``fakedocker``): the argv docker is given."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.__main__ import _runs_containers
from zen.agent.agent import Agent
from zen.agent.container import (
    GIB, MIB, Sandbox, Shape, container_options, ensure_networks, exit_note, network_name, reserved_memory,
    slot_limits,
)
from zen.agent.runner import JobSpec, RunningJob, docker_argv, plan_launch
from zen.agent.slots import Capacity, Slots
from zen.agent.staging import AttemptData
from zen.core.config import ClusterConfig, ContainerPolicy

# a2-highgpu-8g: 8 A100, 96 vCPUs, 680 GB
BIG = Shape(memory_bytes=680 * GIB, cpus=96, gpus=8, max_jobs=4, tasks=4_194_304)


def option(argv: list[str], name: str) -> str:
    """The value after ``name`` among the options (before ``--``)."""
    options = argv[:argv.index("--")]
    assert options.count(name) == 1, (name, options)
    return options[options.index(name) + 1]


def spec(gpu_ids=None, **fields) -> JobSpec:
    return JobSpec(job_id="train", attempt=1, image="img:1", command=["python", "train.py"], gpu_ids=gpu_ids,
                   **fields)


def test_by_default_a_container_runs_as_nobody_without_capabilities_on_a_read_only_root():
    argv = docker_argv(spec(data_dirs={"ZEN_SCRATCH_DIR": "/work/a/scratch"}))  # every attempt's (on the VM's disk)
    options = argv[:argv.index("--")]
    assert option(argv, "--user") == "65534:65534"
    assert option(argv, "--cap-drop") == "ALL" and option(argv, "--security-opt") == "no-new-privileges"
    assert "--read-only" in options and option(argv, "--tmpfs").startswith("/tmp:rw,exec,")
    home = "HOME=/work/a/scratch"  # nobody's HOME does not exist: its caches go to disk, not /tmp's memory
    assert ["-e", home] == options[options.index(home) - 1:options.index(home) + 1] and "HOME=/tmp" not in options
    assert option(argv, "--network") == "zen-net"
    assert "--privileged" not in options and "--cap-add" not in options
    assert argv[argv.index("--") + 1:] == ["img:1", "python", "train.py"]


def test_a_cluster_may_run_the_images_own_user_and_a_job_may_set_its_home():
    argv = docker_argv(spec(sandbox=Sandbox(run_as="image"), env={"HOME": "/work"}))
    assert "--user" not in argv and "HOME=/tmp" not in argv and "HOME=/work" in argv
    assert option(argv, "--cap-drop") == "ALL" and "--read-only" in argv  # the rest holds for root too
    assert "HOME=/tmp" not in docker_argv(spec(env={"HOME": "/work"}))  # the job's own HOME is kept


def test_inputs_are_mounted_read_only_and_outputs_and_scratch_writable_for_nobody(tmp_path):
    data = AttemptData("train", 1, [], "gs://b/out", tmp_path / "work")
    data.prepare()
    argv = docker_argv(spec(data_dirs=data.env()))
    mounts = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-v"]
    assert mounts == [f"{data.input_dir}:{data.input_dir}:ro", f"{data.output_dir}:{data.output_dir}",
                      f"{data.scratch_dir}:{data.scratch_dir}"]
    assert data.output_dir.stat().st_mode & 0o777 == 0o777  # uid 65534 can write its outputs
    assert data.scratch_dir.stat().st_mode & 0o777 == 0o777  # and its scratch directory
    data.cleanup()


def test_without_a_shape_there_are_no_resource_limits_but_with_one_each_slot_gets_its_share():
    assert "--memory" not in docker_argv(spec()) and "--pids-limit" not in docker_argv(spec())
    sandbox = Sandbox(shape=BIG)
    quarter, half = docker_argv(spec((0, 1), sandbox=sandbox)), docker_argv(spec((2, 3, 4, 5), sandbox=sandbox))
    usable_mib = (BIG.memory_bytes - 4 * GIB) // MIB  # 5 % of 680 GiB is above the 4 GiB kept at most
    assert option(quarter, "--memory") == f"{usable_mib // 4}m" == option(quarter, "--memory-swap")
    assert option(half, "--memory") == f"{usable_mib // 2}m"
    assert option(quarter, "--cpus") == "23.87" and option(half, "--cpus") == "47.75"  # (96 - 0.5) x share
    assert option(quarter, "--pids-limit") == str(int(4_194_304 * 0.75 / 4))
    assert option(quarter, "--tmpfs").endswith(f",size={usable_mib // 8}m")  # half its memory, counted in it
    assert option(quarter, "--oom-score-adj") == "500"


def test_a_slot_gets_shared_memory_for_its_processes_to_pass_data_through():
    """Docker's /dev/shm is 64 MB unless told: PyTorch's DataLoader workers died of a bus error ("insufficient
    shared memory (shm)") and NCCL failed between a job's GPUs. A slot's /dev/shm is half its memory, as its /tmp."""
    quarter = docker_argv(spec((0, 1), sandbox=Sandbox(shape=BIG)))
    assert option(quarter, "--shm-size") == f"{(BIG.memory_bytes - 4 * GIB) // MIB // 8}m"
    # What a job writes there is memory of its container's, as /tmp's is: out of memory, it is told both count.
    note = exit_note(137, "", True, slot_limits(BIG, (0, 1)).memory_bytes) or ""
    assert "(its share of the VM's memory; its files in /tmp and /dev/shm count)" in note, note


@pytest.mark.parametrize("shape", [BIG, Shape(memory_bytes=85 * GIB, cpus=12, gpus=1), Shape(2 * GIB, 1, 4, 4, 32768),
                                   Shape(memory_bytes=170 * GIB, cpus=24, gpus=2, max_jobs=2, tasks=32768)])
def test_the_slots_of_a_full_vm_never_add_up_to_more_than_it_has(shape):
    """Whatever way the VM's GPUs are split, the jobs' limits together leave the VM its reserve."""
    slots = [tuple(range(i, i + shape.gpus // shape.max_jobs)) for i in range(0, shape.gpus, shape.gpus // shape.max_jobs)]
    limits = [slot_limits(shape, ids if shape.max_jobs > 1 else None) for ids in slots]
    assert sum(l.memory_bytes for l in limits) <= shape.memory_bytes - reserved_memory(shape.memory_bytes)
    assert sum(l.cpus for l in limits) <= max(shape.cpus - 0.5, shape.cpus if shape.cpus < 2 else 0)
    assert sum(l.tasks for l in limits) <= shape.tasks * 0.75 or all(l.tasks == 256 for l in limits)
    whole = slot_limits(shape, None)  # one job at a time: the whole VM but the reserve
    assert whole.memory_bytes >= sum(l.memory_bytes for l in limits) and whole.memory_bytes < shape.memory_bytes


def test_jobs_running_at_once_are_on_networks_of_their_own():
    names = {network_name(ids) for ids in [(0, 1), (2,), (3,), (4, 5, 6, 7)]}
    assert len(names) == 4 and "zen-net" not in names
    assert option(docker_argv(spec((4, 5, 6, 7))), "--network") == "zen-net-4"
    assert option(docker_argv(spec((1,), sandbox=Sandbox(network="none"))), "--network") == "none"


def test_the_agent_makes_its_slots_networks_once(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    sandbox = Sandbox(shape=dataclasses.replace(BIG, max_jobs=4))
    assert ensure_networks(sandbox, docker.path) is None
    assert docker.networks() == [f"zen-net-{i}" for i in range(8)]  # any GPU may be a slot's first
    made = [c for c in docker.calls() if c[:2] == ["network", "create"]]
    assert len(made) == 8 and all("com.docker.network.bridge.enable_icc=false" in c for c in made)
    assert ensure_networks(sandbox, docker.path) is None  # again: nothing made twice
    assert len([c for c in docker.calls() if c[:2] == ["network", "create"]]) == 8
    whole = FakeDocker(tmp_path / "whole")
    assert ensure_networks(Sandbox(shape=dataclasses.replace(BIG, max_jobs=1)), whole.path) is None
    assert whole.networks() == ["zen-net"]
    assert ensure_networks(Sandbox(network="none"), FakeDocker(tmp_path / "none").path) is None
    broken = FakeDocker(tmp_path / "broken")
    broken.fail("network")
    assert "cannot make the job network zen-net" in ensure_networks(Sandbox(), broken.path)


def test_the_slots_bridges_are_named_as_nccl_leaves_them_out(tmp_path):
    """A gang's node shares the VM's network (``--network host``), where the VM's slot networks have their bridges.
    Unless told (``NCCL_SOCKET_IFNAME``), NCCL uses every interface but ``docker*`` and ``lo``: named by docker,
    ``br-<id>`` with 172.18.0.1 on every VM, the bridge was among them, an address no peer can reach."""
    for max_jobs, expected in ((1, {"zen-net": "docker-zen"}), (8, {f"zen-net-{i}": f"docker-zen-{i}" for i in range(8)})):
        docker = FakeDocker(tmp_path / f"docker-{max_jobs}")
        assert ensure_networks(Sandbox(shape=dataclasses.replace(BIG, max_jobs=max_jobs)), docker.path) is None
        made = [c for c in docker.calls() if c[:2] == ["network", "create"]]
        bridges = {c[-1]: next((o.split("=", 1)[1] for o in c if o.startswith("com.docker.network.bridge.name=")), None)
                   for c in made}
        assert bridges == expected
        assert all(bridge.startswith("docker") and len(bridge) <= 15 for bridge in expected.values())  # IFNAMSIZ - 1


def test_the_shape_is_read_from_the_host(tmp_path):
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "meminfo").write_text("MemTotal:       87654321 kB\nMemFree:          1234 kB\n")
    (tmp_path / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    (tmp_path / "sys" / "kernel" / "threads-max").write_text("2000000\n")
    shape = Shape.of_host(8, 2, proc=tmp_path)
    assert shape == Shape(memory_bytes=87654321 * 1024, cpus=os.cpu_count(), gpus=8, max_jobs=2, tasks=2_000_000)
    real = Shape.of_host(1, 1)  # this machine
    assert real.memory_bytes > 0 and real.tasks > 0


def test_a_shared_vms_agent_runs_each_job_within_its_slot(tmp_path):
    """Through the agent: a 2-GPU job on an 8-GPU VM running 4 at once gets a quarter of the VM."""
    docker = FakeDocker(tmp_path / "docker")
    docker.leaves()  # the CLI exits 0 at once
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("shared", image="img:1", command=["x"], gpus=2))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False, slots=Slots(Capacity(gpus=8, max_jobs=4)),
                  sandbox=Sandbox(shape=BIG))
    transport.answer = confirm = confirm_claims(VM)

    def scheduler(message):  # the attempt runs in a thread of its own: over once it has ended
        if getattr(message, "status", None) is not None and message.status.value == "SUCCEEDED":
            agent.request_shutdown("test over")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0
    assert [r[:3] for r in transport.job_reports()][-1] == ("shared", 1, "SUCCEEDED")
    run = next(call for call in docker.calls() if call[0] == "run")
    limits = slot_limits(BIG, (0, 1))
    assert option(run, "--gpus") == '"device=0,1"' and option(run, "--network") == "zen-net-0"
    assert option(run, "--memory") == f"{limits.memory_bytes // MIB}m" and option(run, "--user") == "65534:65534"


def test_a_container_started_by_the_runner_gets_the_options(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.leaves()
    job = RunningJob.start(spec((3,), sandbox=Sandbox(shape=BIG)), local=False, docker=docker.path)
    assert job.outcome().exit_code == 0
    run = next(call for call in docker.calls() if call[0] == "run")
    assert run == docker_argv(spec((3,), sandbox=Sandbox(shape=BIG)), docker.path)[1:]
    assert container_options(spec((3,)), Sandbox(shape=BIG)) == run[run.index("--cap-drop"):run.index("ZEN_JOB_ID=train") - 1]
    assert option(run, "--pids-limit") == str(slot_limits(BIG, (3,)).tasks)


def test_a_container_keeps_no_copy_of_its_output_on_the_vms_disk(tmp_path):
    """Docker's default log (json-file, never rotated) kept every byte a job printed under /var/lib/docker, on the
    disk its neighbours share and outside its measured share: a job printing 100 MB/s filled the VM's disk within the
    hour. The agent reads the output from ``docker run`` itself; docker keeps none (any cluster's policy)."""
    docker = FakeDocker(tmp_path / "docker")
    docker.leaves()
    opted_out = Sandbox(shape=BIG, run_as="image", read_only_root=False)
    for sandbox in (Sandbox(shape=BIG), opted_out):
        job = RunningJob.start(spec((3,), sandbox=sandbox), local=False, docker=docker.path)
        assert job.outcome().exit_code == 0
    runs = [call for call in docker.calls() if call[0] == "run"]
    assert len(runs) == 2
    for run in runs:
        assert option(run, "--log-driver") == "none"


def test_host_processes_only_when_told():
    """Before, an identity in the environment (three variables) made the agent run jobs as root host
    processes; now only ``ZEN_AGENT_LOCAL=1`` does."""
    identity = {"ZEN_VM_NAME": "vm-1", "ZEN_ZONE": "us-central1-a", "ZEN_CLUSTER": "4xa100-40gb"}
    assert _runs_containers(identity) and _runs_containers({})
    assert _runs_containers({**identity, "ZEN_AGENT_LOCAL": "0"})
    assert not _runs_containers({**identity, "ZEN_AGENT_LOCAL": "1"})
    assert plan_launch(spec(), local=False).container is not None


def test_the_agent_check_says_containers_unless_local_is_set(tmp_path):
    shared = Path(__file__).resolve().parents[2] / "shared"
    env = {"ZEN_VM_NAME": "vm-1", "ZEN_ZONE": "us-central1-a", "ZEN_CLUSTER": "4xa100-40gb", "ZEN_PROJECT": "p",
           "PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(filter(None, [str(shared),
                                                                                       os.environ.get("PYTHONPATH")]))}

    def check(**extra) -> dict:
        done = subprocess.run([sys.executable, "-m", "zen.agent", "--check"], env={**env, **extra},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    checked = check()
    assert checked["local"] is False
    assert checked["sandbox"]["run_as"] == "65534:65534" and checked["sandbox"]["shape"]["memory_bytes"] > 0
    assert checked["sandbox"]["read_only_root"] is True and checked["sandbox"]["network"] == "job"
    assert check(ZEN_AGENT_LOCAL="1")["local"] is True


def test_the_configuration_opts_out_per_cluster():
    base = {"name": "c", "gpu_type": "nvidia-tesla-a100", "gpu_count": 8, "regions": ["us-central1"],
            "max_vms_per_region": 1, "max_vms": 1}
    assert ClusterConfig(**base).containers == ContainerPolicy(run_as="65534:65534", network="job", read_only_root=True)
    assert "--read-only" not in docker_argv(spec(sandbox=Sandbox(read_only_root=False)))
    opted = ClusterConfig(**base, containers={"run_as": "image", "network": "none"}).containers
    assert (opted.run_as, opted.network) == ("image", "none")
    assert ClusterConfig(**base, containers={"run_as": "1000:1000"}).containers.run_as == "1000:1000"
    for bad in ({"run_as": "root"}, {"run_as": "0"}, {"network": "host"}, {"privileged": True}):
        with pytest.raises(ValidationError):
            ClusterConfig(**base, containers=bad)
