"""A gang's node on the agent (zen.core.gang): it sends its address with its claim, waits for the CONFIRM
past the usual claim tries (it comes once the last node claims, within the gang's assemble_s), and runs
the command with its place in the environment (Zen's names and torchrun's)."""

from __future__ import annotations

import sys
from dataclasses import replace

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, make_agent, start_message
from zen.agent.agent import Agent
from zen.core.gang_records import GangPlace
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

PRINT_PLACE = [sys.executable, "-c", "import os; print('place', *(os.environ[k] for k in ('ZEN_NODE_RANK', "
               "'ZEN_NUM_NODES', 'ZEN_NODE_IPS', 'MASTER_ADDR', 'MASTER_PORT', 'NNODES', 'NODE_RANK')))"]


def test_a_node_waits_for_its_gang_and_runs_with_its_place_in_the_environment():
    transport = FakeTransport(IDENTITY.vm)
    transport.add_start(start_message(command=PRINT_PLACE, nodes=2, assemble_s=60))
    claims: list[Heartbeat] = []
    place = GangPlace(rank=1, nodes=2, ips=["10.0.0.7", "10.1.2.3"], port=29517)

    def zen(message):  # the gang completes only after the 5th CLAIMED (the usual claim gives up after 3)
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            claims.append(message)
            if len(claims) == 5:
                return [ControlMessage(vm=IDENTITY.vm, job_id="j1", attempt=1, action=ControlAction.CONFIRM,
                                       reason="gang complete", gang=place)]
        return []

    transport.answer = zen
    agent = Agent(replace(IDENTITY, ip="10.1.2.3"), replace(SETTINGS, claim_timeout_s=5, claim_tries=3), transport,
                  local=True, clock=transport.clock)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0 and agent.jobs_run == 1
    assert [c.ip for c in claims] == ["10.1.2.3"] * 5
    final = [m for m in transport.published if isinstance(m, Heartbeat)][-1]
    assert final.status is AgentStatus.SUCCEEDED
    assert "place 1 2 10.0.0.7,10.1.2.3 10.0.0.7 29517 2 1" in (final.message or ""), final.message
    running = [m for m in transport.published if isinstance(m, Heartbeat) and m.status is AgentStatus.RUNNING]
    assert all(m.ip is None for m in running)  # the address goes with a claim only


def test_a_gang_node_never_confirmed_gives_the_start_back_after_the_gangs_wait():
    transport = FakeTransport(IDENTITY.vm)
    ack_id = transport.add_start(start_message(nodes=2, assemble_s=20))
    agent = make_agent(transport, replace(SETTINGS, claim_timeout_s=5, claim_tries=3))
    assert agent.run() == 0 and agent.jobs_run == 0
    claimed = [r for r in transport.job_reports() if r[2] == "CLAIMED"]
    assert len(claimed) == 5  # 20 s / 5 s + 1: past Zen's deadline, not the usual 3 tries
    assert transport.calls[-1] == ("nack", ack_id)


def test_a_gang_nodes_container_shares_the_vms_network_and_others_keep_their_own():
    from zen.agent.container import Sandbox, container_options
    from zen.agent.runner import JobSpec
    from zen.core.gang_records import node_env

    env = node_env(GangPlace(rank=0, nodes=2, ips=["a", "b"], port=29600))
    node = JobSpec(job_id="g", attempt=1, image="img", env=env, gang_node=True)
    options = container_options(node, Sandbox())
    assert options[options.index("--network") + 1] == "host"
    alone = container_options(JobSpec(job_id="j", attempt=1, image="img"), Sandbox())
    assert alone[alone.index("--network") + 1] == "zen-net"
    posing = container_options(JobSpec(job_id="j", attempt=1, image="img", env=env), Sandbox())  # its own env says so
    assert posing[posing.index("--network") + 1] == "zen-net"
    cut_off = container_options(node, Sandbox(network="none"))  # the cluster's choice stands
    assert cut_off[cut_off.index("--network") + 1] == "none"


def test_a_gang_node_pulls_its_image_while_it_waits_for_the_others_and_a_one_node_job_does_not(tmp_path):
    """The image is pulled in the background while the node waits for its CONFIRM, so the gang's
    containers start from an image already here once the last node claims; a part given back unanswered
    leaves no image behind that no job here ran."""
    from tests.agent.fakedocker import FakeDocker
    from tests.agent.helpers import wait_for

    docker = FakeDocker(tmp_path / "docker")
    transport = FakeTransport(IDENTITY.vm, virtual_time=False)  # the pull's process runs in real time
    transport.add_start(start_message("single", image="img:solo", command=["x"]))
    ack_id = transport.add_start(start_message("pair", image="img:gang", command=["x"], nodes=2, assemble_s=2))
    settings = replace(SETTINGS, claim_timeout_s=1, claim_tries=1, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0 and agent.jobs_run == 0  # neither confirmed: both given back
    assert ("nack", ack_id) in transport.calls
    assert ["pull", "--", "img:gang"] in docker.calls() and ["pull", "--", "img:solo"] not in docker.calls()
    assert [c for c in docker.calls() if c[0] == "run"] == []  # pulled ahead, never run unconfirmed
    wait_for(lambda: ["image", "rm", "img:gang"] in docker.calls())  # no job here ran it: not kept
    assert not agent.cache.holds_image("img:gang")


def test_a_confirmed_gang_node_keeps_the_image_it_pulled_ahead(tmp_path):
    from tests.agent.fakedocker import FakeDocker
    from tests.agent.fakes import confirm_claims

    docker = FakeDocker(tmp_path / "docker")
    docker.leaves()  # each docker run ends at once (its container left for the agent to remove)
    transport = FakeTransport(IDENTITY.vm, virtual_time=False)
    transport.add_start(start_message("pair", image="img:gang", command=["x"], nodes=2, assemble_s=20))
    settings = replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    transport.answer = confirm_claims(IDENTITY.vm)
    assert agent.run() == 0 and agent.jobs_run == 1
    calls = docker.calls()  # the pull and the run may come in either order when the CONFIRM comes at once
    assert ["pull", "--", "img:gang"] in calls and any(c[0] == "run" for c in calls)
    assert ["image", "rm", "img:gang"] not in calls and agent.cache.holds_image("img:gang")


def test_a_pull_still_going_when_the_part_is_given_back_is_stopped(tmp_path):
    from pathlib import Path

    from tests.agent.fakedocker import FakeDocker

    docker = FakeDocker(tmp_path / "docker")
    docker.hang("pull")  # a registry that never answers

    def pulls() -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if docker.path.encode() in args and b"pull" in args:
                found.append(cmdline.parent.name)
        return found

    transport = FakeTransport(IDENTITY.vm, virtual_time=False)
    transport.add_start(start_message("pair", image="img:gang", command=["x"], nodes=2, assemble_s=2))
    settings = replace(SETTINGS, claim_timeout_s=1, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0 and agent.jobs_run == 0
    assert ["pull", "--", "img:gang"] in docker.calls() and pulls() == []
