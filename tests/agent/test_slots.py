"""Several attempts on one VM (``zen.agent.slots``): disjoint GPUs per attempt, the VM's capacity
from the variables, its template or the configuration, and the agent loop running two attempts at
once against a fake transport (real time, real runner): each its own GPUs, heartbeats and stop; a
start message that does not fit the GPUs left is given back at once; pull limits count both."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace

import pytest

from tests.agent.fakes import FakeMetadata, FakeTransport, confirm_claims
from tests.agent.helpers import job_command
from zen.agent.agent import Agent
from zen.agent.identity import Identity, MetadataServer
from zen.agent.limits import DailyPulls, PullLimits
from zen.agent.runner import JobSpec, docker_argv, plan_launch
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots, resolve_capacity
from zen.core.config import load_config
from zen.core.errors import ConfigError
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, StartMessage
from zen.core.vm_heartbeat import HeldAttempt, VmHeartbeat

VM = "vm-shared"
IDENTITY = Identity(project="p", vm=VM, cluster="8xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
SETTINGS = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3, lease_s=10,
                         vm_heartbeat_s=1000)


def test_each_attempt_gets_its_own_gpus_lowest_first_until_the_slots_or_gpus_run_out():
    slots = Slots(Capacity(gpus=8, max_jobs=3))
    assert slots.take(("a", 1), 4) == (0, 1, 2, 3)
    assert slots.take(("b", 1), None) is None  # the whole VM: not now
    assert slots.take(("b", 1), 2) == (4, 5) and not slots.full()
    assert slots.take(("c", 1), 3) is None  # two GPUs left
    slots.give_back(("a", 1))
    assert slots.take(("c", 1), 3) == (0, 1, 2) and not slots.full()
    assert slots.take(("d", 1), 1) == (3,) and slots.full()  # three attempts: the most it runs
    assert slots.never_fits(9) == "the job holds 9 GPUs, this VM has 8" and slots.never_fits(None) is None

    one = Slots(Capacity(gpus=8, max_jobs=1))  # one job at a time: the whole VM, no device list
    assert one.take(("a", 1), 4) == () and one.full() and one.take(("b", 1), 1) is None


def test_a_job_sharing_its_vm_sees_only_its_gpus_as_a_process_and_in_a_container():
    spec = JobSpec(job_id="j", attempt=1, command=["train"], image="img:1", env={"CUDA_VISIBLE_DEVICES": "0"},
                   gpu_ids=(4, 5, 6, 7))
    assert {k: v for k, v in plan_launch(spec, local=True).env.items() if "GPU" in k or "CUDA" in k} == {
        "ZEN_GPU_IDS": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "4,5,6,7",  # the job's own value does not win
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # nvidia-smi's indices, in bus order (CUDA's own: fastest first)
    argv = docker_argv(spec)
    assert argv[argv.index("--gpus") + 1] == '"device=4,5,6,7"'  # the container sees them as 0-3
    # Inside the container the job's own CUDA_VISIBLE_DEVICES picks among its devices (0-3): kept.
    assert "ZEN_GPU_IDS=4,5,6,7" in argv and [a for a in argv if a.startswith("CUDA_")] == ["CUDA_VISIBLE_DEVICES=0"]
    whole = JobSpec(job_id="j", attempt=1, command=["train"], image="img:1")  # one job per VM: every GPU
    assert docker_argv(whole)[docker_argv(whole).index("--gpus") + 1] == "all" and "ZEN_GPU_IDS" not in whole.job_env()


def test_capacity_comes_from_the_variables_then_the_template_then_the_configuration():
    cluster = load_config().cluster("8xa100-40gb").model_copy(update={"max_jobs_per_vm": 2})
    on_gce = replace(IDENTITY, from_environment=False)
    metadata = FakeMetadata({"instance/attributes/zen-max-jobs-per-vm": "4", "instance/attributes/zen-gpu-count": ""})
    try:
        server = MetadataServer(metadata.host)
        assert resolve_capacity(AgentSettings(), server, on_gce, cluster) == Capacity(gpus=8, max_jobs=4)
        assert resolve_capacity(AgentSettings(max_jobs_per_vm=3, gpus=6), server, on_gce, cluster) == Capacity(6, 3)
        assert resolve_capacity(AgentSettings(), server, IDENTITY, cluster) == Capacity(8, 2)  # locally: no server
        metadata.values["instance/attributes/zen-gpu-count"] = "2"
        with pytest.raises(ConfigError, match="4 jobs at once on a VM of 2 GPUs"):
            resolve_capacity(AgentSettings(), server, on_gce, cluster)
    finally:
        metadata.close()
    assert AgentSettings.from_env({"ZEN_AGENT_MAX_JOBS_PER_VM": "2", "ZEN_AGENT_GPUS": "8"}).max_jobs_per_vm == 2
    with pytest.raises(ConfigError, match="ZEN_AGENT_MAX_JOBS_PER_VM='two' is not a whole number"):
        AgentSettings.from_env({"ZEN_AGENT_MAX_JOBS_PER_VM": "two"})


def start(job_id: str, gpus: int | None, *args: str) -> StartMessage:
    return StartMessage(job_id=job_id, attempt=1, cluster="8xa100-40gb", user_id="alice", regions=["us-central1"],
                        gpus=gpus, command=job_command("--print-env", "CUDA_VISIBLE_DEVICES", *args))


def test_two_attempts_run_at_once_each_with_its_gpus_and_stop_and_one_that_does_not_fit_is_given_back():
    transport = FakeTransport(VM, virtual_time=False)
    first = transport.add_start(start("first", 4, "--sleep", "1.5"))
    whole = transport.add_start(start("whole", None))  # 4 GPUs left: given back at once
    transport.add_start(start("second", 4, "--sleep", "60"))  # stopped by the scheduler
    confirm = confirm_claims(VM)

    # Confirms every claim, and stops "second" once it has run a moment (4 reports) and "first", started with
    # it, has printed, slept 1.5 s and ended: stopped after 4 reports alone, a loaded run's "second" had not
    # yet printed its CUDA_VISIBLE_DEVICES line.
    stopped = []

    def scheduler(message):
        reports = transport.job_reports()
        if (isinstance(message, Heartbeat) and message.job_id == "second" and not stopped
                and sum(1 for report in reports if report[0] == "second") >= 4
                and ("first", 1, "SUCCEEDED") in {report[:3] for report in reports}):
            stopped.append(message)
            return [ControlMessage(vm=VM, job_id="second", attempt=1, action=ControlAction.STOP, reason="user")]
        return confirm(message)

    transport.answer = scheduler
    pulls = DailyPulls(PullLimits(max_jobs=5), 8)
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, pulls=pulls, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    transport.when_idle = lambda: agent.jobs_run >= 2 and agent.request_shutdown("test over")

    assert agent.run() == 0

    finals = {m.job_id: m for m in transport.published
              if isinstance(m, Heartbeat) and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)}
    assert {job_id: m.status for job_id, m in finals.items()} == {
        "first": AgentStatus.SUCCEEDED, "second": AgentStatus.STOPPED}
    devices = {job_id: re.search(r"CUDA_VISIBLE_DEVICES=(\S+)", m.message).group(1) for job_id, m in finals.items()}
    assert devices == {"first": "0,1,2,3", "second": "4,5,6,7"}
    assert ("nack", whole) in transport.calls and ("ack", first) in transport.calls
    assert [r for r in transport.job_reports() if r[0] == "whole"] == []  # never claimed
    beats = [m for m in transport.published if isinstance(m, VmHeartbeat)]
    assert any(m.jobs is not None and len(m.jobs) == 2 for m in beats)  # the VM named both while they ran
    assert beats[-1].state.value == "STOPPING" and pulls.jobs() == 2 and pulls.gpu_hours() > 0


def test_a_pull_limit_counts_running_attempts_and_retiring_never_stops_the_one_that_runs():
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start("only", 4, "--sleep", "1"))
    left = transport.add_start(start("over-the-limit", 4))
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, pulls=DailyPulls(PullLimits(max_jobs=1), 8),
                  slots=Slots(Capacity(gpus=8, max_jobs=2)))
    confirm = confirm_claims(VM)

    def scheduler(message):  # confirms every claim; the test ends once "only" has ended
        if isinstance(message, Heartbeat) and message.status is AgentStatus.SUCCEEDED:
            agent.request_shutdown("test over")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0

    assert [r[2] for r in transport.job_reports() if r[0] == "only"][-1] == "SUCCEEDED"
    assert [delivery.ack_id for delivery in transport.starts] == [left]  # never pulled: one running counts
    retired = [m for m in transport.published if isinstance(m, VmHeartbeat) and m.state.value == "RETIRED"]
    assert retired[0].jobs == [HeldAttempt(job_id="only", attempt=1)]  # RETIRED while "only" still ran


def test_a_pull_limit_counts_claims_waiting_for_their_answer_until_it_comes():
    """max_jobs_per_day 1 with two slots: the loop pulled again while the first claim's CONFIRM was on
    its way (not yet counted), and the VM ran two jobs. A refused claim must not count at all."""

    def run(*jobs: str) -> tuple[list[str], list[str]]:
        transport = FakeTransport(VM, virtual_time=False)
        for job_id in jobs:
            transport.add_start(start(job_id, 4, "--sleep", "0.5"))
        agent = Agent(IDENTITY, SETTINGS, transport, local=True, pulls=DailyPulls(PullLimits(max_jobs=1), 8),
                      slots=Slots(Capacity(gpus=8, max_jobs=2)))

        def scheduler(message):  # answers each claim after a Pub/Sub round trip; "refused" loses its claim
            if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
                action = ControlAction.RELEASE if message.job_id == "refused" else ControlAction.CONFIRM
                order = ControlMessage(vm=VM, job_id=message.job_id, attempt=1, action=action, reason="answer")
                threading.Timer(0.3, lambda: transport.controls.append(order)).start()
            if isinstance(message, Heartbeat) and message.status is AgentStatus.SUCCEEDED:
                threading.Timer(0.5, lambda: agent.request_shutdown("test over")).start()
            return []

        transport.answer = scheduler
        assert agent.run() == 0
        ran = sorted(r[0] for r in transport.job_reports() if r[2] == "SUCCEEDED")
        return ran, [json.loads(delivery.data)["job_id"] for delivery in transport.starts]

    assert run("first", "second") == (["first"], ["second"])  # "second" never pulled
    assert run("refused", "again") == (["again"], [])  # the refused claim left room for "again"


def test_a_second_copy_of_a_start_the_vm_holds_is_dropped_and_the_running_attempt_keeps_its_slot_and_stops():
    """A widened or republished start reaches the VM that already runs its attempt:
    the copy is acked at once; it must not take a second slot, replace the attempt's control inbox,
    or, when its claim goes unanswered, give the running attempt's slot back."""
    transport = FakeTransport(VM, virtual_time=False)
    held = transport.add_start(start("dup", 4, "--sleep", "30"))
    copy = transport.add_start(start("dup", 4, "--sleep", "30"))
    confirmed: list[int] = []

    def scheduler(message):  # like Zen: the first CLAIMED wins, a later one from the same VM is a duplicate
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and not confirmed:
            confirmed.append(message.seq)
            return [ControlMessage(vm=VM, job_id="dup", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        return []

    transport.answer = scheduler
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    seen: dict[str, object] = {}

    def probe() -> None:
        deadline = time.monotonic() + 10
        while not _settled(transport, copy) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        seen["held"] = agent.slots.held()
        seen["whole VM free"] = agent.slots.take(("other", 1), 8)  # 4 of 8 GPUs are the running job's
        transport.order("dup", 1, ControlAction.STOP, "user")
        deadline = time.monotonic() + 10
        while not any(r[2] == "STOPPED" for r in transport.job_reports()) and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.request_shutdown("test over")

    threading.Thread(target=probe, daemon=True).start()
    assert agent.run() == 0
    assert _settled(transport, copy) and ("ack", held) in transport.calls
    assert seen == {"held": [("dup", 1)], "whole VM free": None}
    assert [r[2] for r in transport.job_reports() if r[2] not in ("RUNNING",)] == ["CLAIMED", "STOPPED"]


def _settled(transport: FakeTransport, copy: str) -> bool:
    """The copy acked (pulled once the claim was won), or given back (pulled while the claim awaited its answer: the
    claim might end without a win, zen.agent.agent); which one depends on the machine's pace, neither takes a slot."""
    return ("ack", copy) in transport.calls or ("nack", copy) in transport.calls
