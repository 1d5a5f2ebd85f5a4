"""Job code must not get the VM's credentials: a container on docker's default
bridge could reach the metadata server and take the agent's service-account token (forged heartbeats,
other clusters' start messages), and a job without an image ran as a plain process, as root, beside
the agent. The startup script rejects containers' traffic to the metadata server before the agent
starts; on a VM a job without an image is refused (locally it still runs as a process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from tests.agent.test_startup_retries import metadata, run_script  # noqa: F401 (a fixture)
from zen.agent.agent import Agent
from zen.agent.runner import CannotRun, JobSpec, plan_launch

REJECT = "DOCKER-USER -d 169.254.169.254/32 -j REJECT"


def test_on_a_vm_a_job_without_an_image_is_refused_with_what_to_do():
    spec = JobSpec(job_id="j", attempt=1, command=["python", "train.py"])
    with pytest.raises(CannotRun, match=r"no image: .* VM's credentials.* with an image"):
        plan_launch(spec, local=False)
    assert plan_launch(spec, local=True).argv == ["python", "train.py"]  # the local stack has no docker


def test_a_vm_agent_fails_an_image_less_job_without_running_it(tmp_path):
    ran = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message(command=[sys.executable, "-c", f"open({str(ran)!r}, 'w')"]))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, SETTINGS, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")

    assert agent.run() == 0

    assert not ran.exists()
    [final] = [m for m in transport.published if getattr(m, "status", None) and m.status.value == "FAILED"]
    assert final.exit_code == 127 and "the job has no image" in final.message


def stand_in(tmp_path: Path, present: bool) -> str:
    """A dry run's stand-in for the commands: iptables's checks (-L, -C) say the chain and the rule
    exist or not; every other command succeeds."""
    script = tmp_path / "stand-in"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"checks = sys.argv[1] == 'iptables' and ('-L' in sys.argv or '-C' in sys.argv)\n"
                      f"sys.exit(0 if {present} or not checks else 1)\n")
    script.chmod(0o755)
    return str(script)


def test_containers_are_kept_from_the_metadata_server_before_the_agent_starts(metadata, tmp_path):  # noqa: F811
    result = run_script(metadata.host, tmp_path / "root", ZEN_STARTUP_DRY_RUN_EXEC=stand_in(tmp_path, False))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    create, reject = "would run: iptables -w -N DOCKER-USER", f"would run: iptables -w -I {REJECT}"
    assert create in lines and reject in lines  # the chain created if docker has not yet
    assert lines.index(create) < lines.index(reject) < lines.index("would run: systemctl restart zen-agent.service")


def test_the_rule_is_inserted_once_whatever_the_boots(metadata, tmp_path):  # noqa: F811
    result = run_script(metadata.host, tmp_path / "root", ZEN_STARTUP_DRY_RUN_EXEC=stand_in(tmp_path, True))

    assert result.returncode == 0, result.stderr
    assert f"would check: iptables -w -C {REJECT}" in result.stdout
    assert "would run: iptables" not in result.stdout  # the chain and the rule are there already


DNS = ("DOCKER-USER -d 169.254.169.254/32 -p udp --dport 53 -j RETURN",
       "DOCKER-USER -d 169.254.169.254/32 -p tcp --dport 53 -j RETURN")
JOBS = "-m owner --uid-owner 1000-4294967294"
HOST = (f"OUTPUT -d 169.254.169.254/32 {JOBS} -j REJECT",  # a gang's node: on the VM's network
        f"OUTPUT -d 169.254.169.254/32 -p udp --dport 53 {JOBS} -j ACCEPT",
        f"OUTPUT -d 169.254.169.254/32 -p tcp --dport 53 {JOBS} -j ACCEPT")


def test_containers_keep_dns_through_the_metadata_address(metadata, tmp_path):  # noqa: F811
    """169.254.169.254 is also the VPC's name server: a REJECT of all of it took DNS from every job."""
    result = run_script(metadata.host, tmp_path / "root", ZEN_STARTUP_DRY_RUN_EXEC=stand_in(tmp_path, False))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    inserted = [line for line in lines if line.startswith("would run: iptables -w -I")]
    # Each inserted at the top: the RETURNs, inserted after the REJECT, come before it in the chain.
    assert inserted == [f"would run: iptables -w -I {rule}" for rule in (REJECT, *DNS, *HOST)]


def fake_iptables(tmp_path: Path) -> Path:
    """An iptables keeping DOCKER-USER's rules in a file: -N creates, -C checks, -I inserts at the top."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "chain"
    script = bin_dir / "iptables"
    script.write_text(f"""#!{sys.executable}
import json, os, sys
path = {str(state)!r}
args = [a for a in sys.argv[1:] if a != "-w"]
chain = json.load(open(path)) if os.path.exists(path) else None
op, rule = args[0], " ".join(args[1:])
if op == "-N":
    json.dump([], open(path, "w")); sys.exit(0)
if op == "-L":
    sys.exit(0 if chain is not None else 1)
if chain is None:
    sys.exit(1)
if op == "-C":
    sys.exit(0 if rule in chain else 1)
if op == "-I":
    json.dump([rule] + chain, open(path, "w")); sys.exit(0)
sys.exit(2)
""")
    script.chmod(0o755)
    return state


def test_the_unit_guards_the_metadata_server_before_every_agent_start(metadata, tmp_path):  # noqa: F811
    """After a reboot the enabled unit may start the agent before the startup script runs again (rules
    do not survive one): its ExecStartPre puts them back, DNS first, and leaves them as they are."""
    import json
    import os
    import subprocess

    root = tmp_path / "root"
    result = run_script(metadata.host, root, ZEN_STARTUP_DRY_RUN_EXEC=stand_in(tmp_path, True))
    assert result.returncode == 0, result.stderr
    unit = (root / "etc/systemd/system/zen-agent.service").read_text()
    assert "ExecStartPre=+/opt/zen/guard-metadata.sh\n" in unit  # "+": as root (the agent is not)
    guard = root / "opt/zen/guard-metadata.sh"

    state = fake_iptables(tmp_path)
    env = {**os.environ, "PATH": f"{state.parent / 'bin'}:{os.environ['PATH']}"}
    for _ in range(2):  # every start: the second changes nothing
        subprocess.run([str(guard)], env=env, check=True, timeout=30)
        chain = json.loads(state.read_text())
        assert chain == [HOST[2], HOST[1], HOST[0], DNS[1], DNS[0], REJECT]  # DNS passes before each REJECT


def test_a_gangs_node_runs_only_as_a_uid_the_vm_keeps_from_the_metadata_server():
    """A gang's node shares the VM's network, where the startup script keeps uids of 1000 and more from the
    metadata server; a cluster whose containers run as the image's user (root, most often) or a system uid
    runs no gang's node."""
    from zen.agent.container import Sandbox

    node = dict(job_id="g", attempt=1, image="img", command=["true"], gang_node=True)
    assert plan_launch(JobSpec(**node, sandbox=Sandbox()), local=False).argv[1] == "run"  # nobody: 65534
    for run_as in ("image", "0:0", "999:999"):
        with pytest.raises(CannotRun, match=f"as user '{run_as}' could reach the metadata server"):
            plan_launch(JobSpec(**node, sandbox=Sandbox(run_as=run_as)), local=False)
    plan_launch(JobSpec(**{**node, "gang_node": False}, sandbox=Sandbox(run_as="image")), local=False)  # its own network
