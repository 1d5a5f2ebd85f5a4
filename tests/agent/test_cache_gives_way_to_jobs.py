"""A nearly full work disk whose space the warm cache holds: the cache is bounded by ``ZEN_AGENT_CACHE_BYTES``
alone (20 GB by default), whatever the disk has free, and the disk watch's nearly-full rule measured only the
attempts: the job writing, well within its share, was stopped FAILED (an attempt spent) as the one that filled
the disk, told to write less or take a larger disk, while the cache's entries, which any job may do without, were
kept. The cache gives way first: its least recently used entries are removed until the disk is no more nearly
full, and only then is a job stopped.
"""

from __future__ import annotations


from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport, confirm_claims, run_to_final
from tests.agent.helpers import job_command
from zen.agent.agent import Agent
from zen.agent.diskquota import FULL_MIN_BYTES, measure
from zen.agent.identity import Identity
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, StartMessage

VM = "vm-cache"
IDENTITY = Identity(project="p", vm=VM, cluster="8xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
QUOTA = 10_000_000  # the attempt's share of the disk
TOTAL = 10_000_000_000  # the (fake) work disk: nearly full under 1 GB free
ENTRY = 1_000_000  # each of the cache's four entries
ROOM = FULL_MIN_BYTES + 3_000_000  # free on the fake disk beyond what the work directory holds


def test_the_cache_gives_way_before_a_job_within_its_share_is_stopped_for_a_nearly_full_disk(tmp_path, storage):
    gcs.Client().create_bucket("out-bkt")
    work = tmp_path / "work"
    cache = work / ".cache" / VM
    cache.mkdir(parents=True)
    for n in range(4):  # kept by an earlier job on this VM: 4 MB, far under the cache's bound
        (cache / f"{n:040x}").write_bytes(b"x" * ENTRY)
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3,
                             lease_s=10, vm_heartbeat_s=1000, work_dir=str(work), disk_per_job_bytes=QUOTA,
                             disk_look_s=0.05)
    transport = FakeTransport(VM, virtual_time=False)
    # 2 MB of outputs, a fifth of its share, then it runs on a while: the watch looks many times meanwhile.
    transport.add_start(StartMessage(job_id="writer", attempt=1, cluster="8xa100-40gb", user_id="alice",
                                     regions=["us-central1"], gpus=8, outputs="gs://out-bkt/w",
                                     command=job_command("--fill", "2000000", "--sleep", "1.5")))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=1)))
    assert agent.cache._bytes == 4 * ENTRY
    # The disk: what the work directory holds (the cache and the job's) comes out of what is free.
    agent.disk._disk_usage = lambda path: (TOTAL, TOTAL - ROOM, ROOM - measure(work).bytes)

    report = run_to_final(agent, transport, "writer")
    assert report.status is AgentStatus.SUCCEEDED, report.message
    assert agent.cache._bytes < 4 * ENTRY  # the cache gave the space back
    assert len(list(cache.iterdir())) < 4
