"""The agent's reads of the metadata server as it starts (its identity, its template's attributes), when the server
gives no answer for a while, as GCE's may during a boot: each such read failed the start at once (exit 2, "agent
cannot start", as for a VM with no zen-cluster), and systemd, restarting the agent 5 s later at most 5 times in 10
minutes, gave up after half a minute, where the startup script's reads wait 90 s: the VM stayed up without an agent,
silent, billed until Zen deleted it as never booted. Now they are tried again for ``ZEN_AGENT_METADATA_WAIT_S``
(90 s); only a 404 means "not set", at the first read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.fakes import FakeMetadata
from zen.agent.identity import MetadataServer

SHARED = Path(__file__).resolve().parents[2] / "shared"
NAME, GPUS = "instance/name", "instance/attributes/zen-gpu-count"


@pytest.fixture
def metadata():
    fake = FakeMetadata({
        NAME: "zen-4xa100-40gb-us-central1-x1y2",
        "instance/zone": "projects/123/zones/us-central1-a",
        "instance/attributes/zen-cluster": "4xa100-40gb",
        "project/project-id": "my-project",
        GPUS: "4",
    })
    yield fake
    fake.close()


def reads(metadata: FakeMetadata, path: str) -> int:
    return sum(1 for request in metadata.requests if request.split("?")[0].endswith(path))


def test_a_read_the_server_gives_no_answer_to_is_tried_again_while_it_may_wait(metadata):
    from zen.agent.identity import MetadataUnavailable

    metadata.failures = {NAME: [503, 500]}
    assert MetadataServer(metadata.host, wait_s=30).get(NAME) == metadata.values[NAME]
    assert reads(metadata, NAME) == 3
    metadata.failures = {NAME: [503]}
    with pytest.raises(MetadataUnavailable, match="HTTP 503"):
        MetadataServer(metadata.host).get(NAME)  # no wait: one try (the preemption's watch has its own pauses)
    assert MetadataServer(metadata.host, wait_s=30).get("instance/attributes/zen-tags") is None  # 404: not set
    assert reads(metadata, "instance/attributes/zen-tags") == 1


def test_the_agent_starts_through_a_metadata_server_that_gave_no_answer_for_a_while(metadata):
    metadata.failures = {NAME: [503, 503], GPUS: [500]}
    env = {"GCE_METADATA_HOST": metadata.host, "PATH": os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SHARED), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "zen.agent", "--check"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    checked = json.loads(done.stdout)
    assert checked["identity"]["vm"] == metadata.values[NAME] and checked["capacity"]["gpus"] == 4
    assert reads(metadata, NAME) == 3 and reads(metadata, GPUS) == 2


@pytest.mark.parametrize("wait", ["nan", "inf"])
def test_a_metadata_wait_that_is_no_finite_number_is_refused_at_start_not_waited_for_ever(metadata, wait):
    """A wait of nan never reached its deadline (no comparison with nan is true), one of inf neither: an agent whose
    metadata server gave no answer waited for ever, the VM up and billed without a working agent. Refused, named."""
    metadata.failures = {NAME: [503] * 1000}
    env = {"GCE_METADATA_HOST": metadata.host, "PATH": os.environ.get("PATH", ""), "ZEN_AGENT_METADATA_WAIT_S": wait,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SHARED), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-m", "zen.agent", "--check"], env=env, capture_output=True,
                              text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        done = None
    assert done is not None, f"ZEN_AGENT_METADATA_WAIT_S={wait}: the agent still waits after 30 s"
    assert done.returncode == 2 and f"ZEN_AGENT_METADATA_WAIT_S='{wait}' is not a number" in done.stderr, done.stderr
