"""A nearly full disk on a VM running two jobs at once, while the attempt holding the most has already ended and
only uploads its outputs: the agent's DiskWatch picked the uploading attempt (the largest) and kept that verdict,
but nothing acts on a verdict during an upload, so its outputs were uploaded and its directory kept for as long
as the upload took, and meanwhile no other attempt could be stopped for the full disk: the neighbour writing ran
on, unchecked, until the disk was full. An attempt that only uploads is no more measured (``DiskWatch.ended``):
the neighbour that writes is the one stopped, and the finished job's outputs go up.
"""

from __future__ import annotations

import threading
import time

from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import job_command
from zen.agent import staging
from zen.agent.agent import Agent
from zen.agent.identity import Identity
from zen.agent.settings import AgentSettings
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, Heartbeat, StartMessage

VM = "vm-shared"
IDENTITY = Identity(project="p", vm=VM, cluster="8xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
QUOTA = 10_000_000  # each attempt's share of the disk
TOTAL = 10_000_000_000  # the (fake) work disk: nearly full under 1 GB free
UPLOAD_S = 4.0  # how long the uploader's upload takes


def start(job_id: str, *args: str, outputs: str | None = None) -> StartMessage:
    return StartMessage(job_id=job_id, attempt=1, cluster="8xa100-40gb", user_id="alice", regions=["us-central1"],
                        gpus=4, command=job_command(*args), outputs=outputs)


def test_a_nearly_full_disk_frees_space_promptly_when_the_largest_attempt_only_uploads(tmp_path, storage,
                                                                                      monkeypatch):
    gcs.Client().create_bucket("out-bkt")
    full = threading.Event()  # the disk is nearly full from the uploader's upload on
    uploading_since: list[float] = []
    upload = staging.AttemptData.upload

    def slow_upload(self, *ended) -> None:  # a large output's upload: it takes a while (and honours its cancel)
        if self.job_id == "uploader":
            uploading_since.append(time.monotonic())
            full.set()
            deadline = time.monotonic() + UPLOAD_S
            while time.monotonic() < deadline and not self.cancel.is_set():
                time.sleep(0.05)
        return upload(self, *ended)

    monkeypatch.setattr(staging.AttemptData, "upload", slow_upload)

    work = tmp_path / "work"
    settings = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, claim_tries=3,
                             lease_s=10, vm_heartbeat_s=1000, work_dir=str(work), disk_per_job_bytes=QUOTA,
                             disk_look_s=0.1)
    transport = FakeTransport(VM, virtual_time=False)
    # The neighbour writes 2 MB (a fifth of its share: a candidate for the full-disk rule) and runs on.
    transport.add_start(start("writer", "--fill", "2000000", "--sleep", "30", outputs="gs://out-bkt/w"))
    # The uploader writes 6 MB of outputs and ends at once: then it only uploads them.
    transport.add_start(start("uploader", "--fill", "6000000", outputs="gs://out-bkt/u"))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, settings, transport, local=True, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    agent.disk._disk_usage = lambda path: (TOTAL, TOTAL - (100_000_000 if full.is_set() else 5_000_000_000),
                                           100_000_000 if full.is_set() else 5_000_000_000)

    seen: dict[str, object] = {}

    def probe() -> None:
        if not full.wait(30):
            seen["error"] = "the uploader never uploaded"
            agent.request_shutdown("test over")
            return
        began = uploading_since[0]
        freed = None
        while time.monotonic() - began < UPLOAD_S - 1.5:  # well before the upload would end by itself
            uploader_dirs = [p for p in work.iterdir() if p.name.startswith("uploader-")]
            writer_ended = any(m.job_id == "writer" and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)
                               for m in transport.published if isinstance(m, Heartbeat))
            if not uploader_dirs or writer_ended:
                freed = round(time.monotonic() - began, 1)
                break
            time.sleep(0.05)
        seen["freed_after_s"] = freed
        seen["verdicts"] = dict(agent.disk._verdicts)
        deadline = time.monotonic() + UPLOAD_S + 10  # the uploader's upload ends, and its report goes
        while time.monotonic() < deadline and not any(
                m.job_id == "uploader" and m.status is AgentStatus.SUCCEEDED
                for m in transport.published if isinstance(m, Heartbeat)):
            time.sleep(0.05)
        agent.request_shutdown("test over")

    threading.Thread(target=probe, daemon=True).start()
    assert agent.run() == 0
    assert "error" not in seen, seen

    assert seen["freed_after_s"] is not None, seen["verdicts"]
    finals = {m.job_id: m for m in transport.published if isinstance(m, Heartbeat)
              and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)}
    assert finals["uploader"].status is AgentStatus.SUCCEEDED  # its outputs went up
    assert finals["writer"].status is AgentStatus.FAILED and "disk was nearly full" in (finals["writer"].message or "")
