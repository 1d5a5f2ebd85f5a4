"""A job's data on its VM, where it went wrong before: a gang's nodes' outputs overwrote each other, a
neighbour still staging filled the disk and the running job was stopped for it, inputs over the job's disk
share were staged in full and the job started, Cloud Logging's reader dropped a gang's second node's lines,
and a start the agent could not launch ended with no final report."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest
from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import IDENTITY, start_message
from zen.agent.agent import Agent
from zen.agent.settings import AgentSettings
from zen.core.gang_records import GangPlace
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat


@pytest.fixture
def client(storage):
    client = gcs.Client()
    for name in ("data-bkt", "out-bkt"):
        client.create_bucket(name)
    return client


def objects(client, bucket, prefix="") -> dict[str, bytes]:
    return {blob.name: blob.download_as_bytes() for blob in client.list_blobs(bucket, prefix=prefix)}


def settings(tmp_path, name="work") -> AgentSettings:
    return AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.05, claim_timeout_s=5, lease_s=10,
                         vm_heartbeat_s=1000, work_dir=str(tmp_path / name))


# -- 1. a gang's nodes uploaded their outputs over each other --------------------------------------------
WRITE_RANK = ("import os, pathlib; pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'metrics.json')"
              ".write_text('rank ' + os.environ['ZEN_NODE_RANK'])")


def run_gang_node(tmp_path, vm: str, rank: int, code: str = WRITE_RANK, **start):
    """One node of a 2-node gang on an agent of its own, told its place by the CONFIRM; its final report."""
    transport = FakeTransport(vm, virtual_time=False)
    transport.add_start(start_message("gang-1", command=[sys.executable, "-c", code], nodes=2, assemble_s=60,
                                      **(start or {"outputs": "gs://out-bkt/runs"})))
    place = GangPlace(rank=rank, nodes=2, ips=["10.0.0.1", "10.0.0.2"], port=29517)

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=vm, job_id="gang-1", attempt=1, action=ControlAction.CONFIRM,
                                   reason="gang complete", gang=place)]
        return []

    transport.answer = zen
    agent = Agent(replace(IDENTITY, vm=vm, ip=f"10.0.0.{rank + 1}"), settings(tmp_path, f"work-{vm}"), transport,
                  local=True)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0
    final = [m for m in transport.published if isinstance(m, Heartbeat)][-1]
    assert final.status is AgentStatus.SUCCEEDED, final.message
    return final


def test_each_gang_node_keeps_its_own_outputs(client, tmp_path):
    """Every node of a gang has the same job_id and attempt, so each uploaded ZEN_OUTPUT_DIR to the same
    <outputs>/<job>/attempt-<n>/: a file both nodes write (metrics, a log, a checkpoint shard named alike)
    was silently overwritten by whichever node uploaded last. Each node has node-<rank>/ of its own now."""
    run_gang_node(tmp_path, "vm-rank0", 0)
    run_gang_node(tmp_path, "vm-rank1", 1)

    stored = objects(client, "out-bkt")
    assert sorted(name for name in stored if name.endswith("/_ZEN_OUTPUTS.json")) == [  # each node's own manifest
        "runs/gang-1/attempt-1/node-0/_ZEN_OUTPUTS.json", "runs/gang-1/attempt-1/node-1/_ZEN_OUTPUTS.json"]
    files = [data for name, data in stored.items() if not name.endswith("/_ZEN_OUTPUTS.json")]
    assert sorted(files) == [b"rank 0", b"rank 1"], stored  # rank 0's output is gone


# -- 2. a neighbour's staging filled the disk and the running job was stopped for it ---------------------
def test_a_disk_filled_by_a_neighbours_staging_does_not_fail_the_running_job(client, tmp_path, monkeypatch):
    """DiskWatch measured an attempt's directory only once its job had started (attempt.py added it after
    RunningJob.start); an attempt still staging was invisible to it. On a VM running two jobs, the disk
    filled by B's inputs (under its share) made the nearly-full rule pick the only attempt it saw, the
    innocent running job A, stopped FAILED ("the largest on it") and never rerun.

    The disk is modelled: 100 GB whose free space shrinks by 10,000 x what the work directory holds
    (A's 1 MB of outputs -> 10 GB, B's 2.5 MB input -> 25 GB; 36 GB free at first), each job's share 3 MB."""
    from tests.agent.helpers import job_command
    from tests.agent.test_slots import IDENTITY as SHARED_IDENTITY, VM as SHARED_VM
    from tests.agent.fakes import confirm_claims
    from zen.agent import staging
    from zen.agent.diskquota import DiskShare, DiskWatch, measure
    from zen.agent.slots import Capacity, Slots

    client.bucket("data-bkt").blob("set/big.bin").upload_from_string(b"b" * 2_500_000)
    work = tmp_path / "work"

    def disk_usage(path):
        free = int(36e9 - 10_000 * measure(work).bytes)
        return int(100e9), int(100e9) - free, free

    fetch = staging.AttemptData._fetch

    def slow_fetch(self, blob, target):  # B's download takes a while, as large inputs do
        fetch(self, blob, target)
        import time
        time.sleep(2.0)

    monkeypatch.setattr(staging.AttemptData, "_fetch", slow_fetch)
    transport = FakeTransport(SHARED_VM, virtual_time=False)
    transport.answer = confirm_claims(SHARED_VM)
    transport.add_start(start_message("job-a", cluster="8xa100-40gb", gpus=4, outputs="gs://out-bkt/r",
                                      command=job_command("--fill", "1000000", "--sleep", "6")))
    transport.add_start(start_message("job-b", cluster="8xa100-40gb", gpus=4, outputs="gs://out-bkt/r",
                                      inputs=[{"uri": "gs://data-bkt/set/big.bin"}],
                                      command=[sys.executable, "-c", "import time; time.sleep(0.5)"]))
    agent = Agent(SHARED_IDENTITY, replace(settings(tmp_path), cache_bytes=0), transport, local=True,
                  slots=Slots(Capacity(gpus=8, max_jobs=2)))
    watch = DiskWatch(str(work), DiskShare(int(100e9), 2, per_job_bytes=3_000_000), look_s=0.1,
                      disk_usage=disk_usage)
    agent.disk = agent.attempts._disk = agent.attempts._prestart._disk = watch
    transport.when_idle = lambda: agent.jobs_run >= 2 and agent.request_shutdown("test over")

    assert agent.run() == 0

    finals = {m.job_id: m for m in transport.published if isinstance(m, Heartbeat)
              and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)}
    assert finals["job-a"].status is AgentStatus.SUCCEEDED, finals["job-a"].message  # FAILED: "disk was nearly full"


# -- 3. zen logs on Cloud Logging dropped a gang's lines -------------------------------------------------
def test_the_cloud_reader_returns_every_gang_nodes_lines(monkeypatch):
    """A gang's nodes ship the same job_id and attempt, each numbering its lines 1, 2, 3... CloudReader kept
    what it read by (attempt, seq), so the second node's lines 1..3 were dropped as "read twice" and its
    final entry marked the attempt done: `zen logs JOB` (Cloud Logging) showed one node's output."""
    import re
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from zen.adapters import cloud_logging

    class Client:
        def __init__(self):
            self.items = []

        def add(self, vm, seq, final=False):
            self.items.append(SimpleNamespace(
                labels={"job_id": "g", "attempt": "1", "stream": "stdout", "vm": vm},
                payload={"message": f"{vm} line {seq}", "seq": seq, "final": final},
                timestamp=datetime(2026, 1, 1, 0, 0, seq, tzinfo=timezone.utc)))

        def list_entries(self, resource_names, filter_, order_by, page_size):
            after = int(m.group(1)) if (m := re.search(r"jsonPayload\.seq>(\d+)", filter_)) else 0
            yield from (item for item in self.items if item.payload["seq"] > after)

    client = Client()
    for seq in (1, 2, 3):
        client.add("vm-rank0", seq, final=seq == 3)
        client.add("vm-rank1", seq, final=seq == 3)
    monkeypatch.setattr(cloud_logging, "REQUEST_INTERVAL_S", 0)
    reader = cloud_logging.CloudReader(client, "p")

    texts = [e.text for e in reader.new_entries("g", 1)] + [e.text for e in reader.new_entries("g", 1)]
    assert sorted(texts) == sorted(f"{vm} line {n}" for vm in ("vm-rank0", "vm-rank1") for n in (1, 2, 3)), texts


# -- 4. a start the agent cannot launch: the attempt ended without a final report ------------------------
@pytest.mark.parametrize("fields", [
    pytest.param({"command": ["echo", "a\0b"]}, id="nul-in-command"),  # Popen raises ValueError, not OSError
    pytest.param({"env": {"A=B": "1"}}, id="env-name-with-equals"),
])
def test_an_odd_start_message_still_gets_a_final_report(client, tmp_path, fields):
    """Zen refuses such values at submission; a start carrying one anyway (a bug, versions apart) raised
    ValueError out of subprocess.Popen, which RunningJob.start did not catch: no final report was sent, and
    Zen waited for its heartbeat timeout. It fails now, reported; an ``outputs`` that is no gs:// URI is a
    start dropped at decode."""
    from tests.agent.fakes import confirm_claims
    from tests.agent.test_agent_loop import VM, make_agent

    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = confirm_claims(VM)
    transport.add_start(start_message("odd-1", **{"outputs": "gs://out-bkt/r", **fields}))
    make_agent(transport, settings(tmp_path)).run()

    statuses = [m.status for m in transport.published if isinstance(m, Heartbeat)]
    assert statuses[-1] in (AgentStatus.FAILED, AgentStatus.SUCCEEDED), statuses
    with pytest.raises(ValueError, match="is not a gs:// URI"):
        start_message("odd-2", outputs="s3://elsewhere/out")



# -- 5. inputs larger than the job's disk share: staged in full, the job started, then killed (before) -------------
def test_inputs_over_the_jobs_disk_share_fail_at_staging_before_the_job_runs(client, tmp_path):
    """AttemptData.stage checked the inputs only against the whole disk's size (staging.py `disk`), and
    DiskWatch measured the directory only once the job ran: inputs over the share were downloaded in full
    (on a real VM, tens of GB, filling the disk meanwhile: see the test above), the job started on them, and
    within a disk look it was stopped FAILED. It fails at staging now, as inputs over the whole disk do."""
    from tests.agent.fakes import confirm_claims
    from tests.agent.test_agent_loop import VM, make_agent

    client.bucket("data-bkt").blob("set/big.bin").upload_from_string(b"b" * 2_500_000)
    marker = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = confirm_claims(VM)
    transport.add_start(start_message("big-in", inputs=[{"uri": "gs://data-bkt/set/big.bin"}],
                                      command=[sys.executable, "-c", f"open({str(marker)!r}, 'w'); import time; "
                                               "time.sleep(3)"]))
    make_agent(transport, replace(settings(tmp_path), disk_per_job_bytes=1_000_000, disk_look_s=0.1,
                                  cache_bytes=0)).run()

    final = [m for m in transport.published if isinstance(m, Heartbeat)][-1]
    # As for a missing input or inputs over the whole disk: FAILED at staging, the job never started (no exit code).
    assert final.exit_code is None and not marker.exists(), (final.status.value, final.exit_code, final.message)


def test_a_finished_attempt_costs_no_more_reads(monkeypatch):
    """The console's output stream calls new_entries for every attempt 1..current on every poll: a finished
    attempt is read once more after every VM heard sent its final entry (a gang's other node may lag), then
    never again (each read is an entries:list request from the project's ~60 a minute)."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from zen.adapters import cloud_logging

    class Client:
        calls = 0

        def list_entries(self, resource_names, filter_, order_by, page_size):
            Client.calls += 1
            if "jsonPayload.seq<=" in filter_:
                return iter(())
            return iter([SimpleNamespace(labels={"job_id": "j", "attempt": "1", "stream": "stdout", "vm": "vm-a"},
                                         payload={"message": f"line {s}", "seq": s, "final": s == 2},
                                         timestamp=datetime(2026, 1, 1, 0, 0, s, tzinfo=timezone.utc))
                         for s in (1, 2)])

    monkeypatch.setattr(cloud_logging, "REQUEST_INTERVAL_S", 0)
    reader = cloud_logging.CloudReader(Client(), "p")
    assert [e.final for e in reader.new_entries("j", 1)] == [False, True]
    before = Client.calls
    for _ in range(5):  # five polls of a console stream
        assert reader.new_entries("j", 1) == []
    assert Client.calls == before + 1, f"{Client.calls - before} more entries:list requests for a finished attempt"


def test_a_disk_verdict_reached_while_staging_stops_the_staging(client, tmp_path, monkeypatch):
    """The watch may pick a staging attempt (over its share, or the largest on a nearly full disk); only the
    running job's supervision read verdicts, so the attempt named went on downloading every input (filling
    the disk the verdict was about), its job was started and only then stopped FAILED. The staging is cut.

    Modelled disk: 100 GB, 11 GB free less 10,000 x the work directory; B stages three 1 MB objects (1 s each):
    after the first, 1 GB free (nearly full), and B, holding 1 MB of its 3 MB share, is the one to stop."""
    import sys
    import time

    from tests.agent.fakes import FakeTransport, confirm_claims
    from tests.agent.test_agent_loop import start_message
    from tests.agent.test_slots import IDENTITY as SHARED_IDENTITY, VM as SHARED_VM
    from zen.agent import attempt as attempt_module, staging
    from zen.agent.agent import Agent
    from zen.agent.diskquota import DiskShare, DiskWatch, measure
    from zen.agent.slots import Capacity, Slots
    from zen.core.models import AgentStatus, Heartbeat
    from dataclasses import replace

    for n in range(3):
        client.bucket("data-bkt").blob(f"set/part-{n}").upload_from_string(bytes([n]) * 1_000_000)
    work = tmp_path / "work"

    def disk_usage(path):
        free = int(11e9 - 10_000 * measure(work).bytes)
        return int(100e9), int(100e9) - free, free

    fetch, fetched = staging.AttemptData._fetch, []

    def slow_fetch(self, blob, target):  # (when each download began: one begun before the verdict may end after it)
        fetched.append((blob.name, time.monotonic()))
        fetch(self, blob, target)
        time.sleep(1.0)

    real_start, started = attempt_module.RunningJob.start, []

    def start(spec, **kw):
        started.append((spec.job_id, time.monotonic()))
        return real_start(spec, **kw)

    monkeypatch.setattr(staging.AttemptData, "_fetch", slow_fetch)
    monkeypatch.setattr(attempt_module.RunningJob, "start", staticmethod(start))
    transport = FakeTransport(SHARED_VM, virtual_time=False)
    transport.answer = confirm_claims(SHARED_VM)
    transport.add_start(start_message("job-b", cluster="8xa100-40gb", gpus=4,
                                      inputs=[{"uri": "gs://data-bkt/set/"}],
                                      command=[sys.executable, "-c", "import time; time.sleep(0.2)"]))
    agent = Agent(SHARED_IDENTITY, replace(settings(tmp_path), cache_bytes=0), transport, local=True,
                  slots=Slots(Capacity(gpus=8, max_jobs=2)))
    verdict_at = []
    watch = DiskWatch(str(work), DiskShare(int(100e9), 2, per_job_bytes=3_000_000), look_s=0.1, disk_usage=disk_usage)
    look = watch.look

    def timed_look():
        found = look()
        if found and not verdict_at:
            verdict_at.append(time.monotonic())
        return found

    watch.look = timed_look
    agent.disk = agent.attempts._disk = agent.attempts._prestart._disk = watch
    transport.when_idle = lambda: agent.jobs_run >= 1 and agent.request_shutdown("test over")

    assert agent.run() == 0

    final = [m for m in transport.published if isinstance(m, Heartbeat) and m.job_id == "job-b"
             and m.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)][-1]
    assert verdict_at, "the watch reached no verdict: the model did not fill the disk"
    assert len(fetched) < 3, f"the verdict came only after staging ended ({fetched}, {verdict_at}): a slow machine"
    after = [name for name, at in fetched if at > verdict_at[0]]
    assert not after and not started, (
        f"verdict reached during staging, yet {len(after)} more download(s) began after it and the job "
        f"was started ({started}); final: {final.status.value}: {final.message!r}")


# -- a gang's nodes' checkpoints overwrote each other -------------------------------------------------
WRITE_RANK_CHECKPOINT = ("import os, pathlib; rank = os.environ['ZEN_NODE_RANK']; "  # a sharded checkpoint
                         "pathlib.Path(os.environ['ZEN_CHECKPOINT_DIR'], f'shard-{rank}.pt')"
                         ".write_text('rank ' + rank)")
CHECKPOINT = {"uri": "gs://out-bkt/ckpt/cl/gang-1/", "every": 600, "max_bytes": 10**9}


def test_each_gang_node_keeps_its_own_checkpoint(client, tmp_path):
    """Every node of a gang saved its ZEN_CHECKPOINT_DIR under the same <checkpoint uri>/attempt-<n>/save-<k>/
    and the same LATEST.json: each rank writing its own shard (as sharded checkpoints do), the second save's
    manifest named its shard only and the first rank's shard was deleted as the older save's. Each node keeps
    its own checkpoint now, node-<rank>/ of the job's."""
    for rank in (0, 1):
        run_gang_node(tmp_path, f"vm-rank{rank}", rank, WRITE_RANK_CHECKPOINT, checkpoint=CHECKPOINT)
    stored = objects(client, "out-bkt", "ckpt/")
    saved = sorted(v for k, v in stored.items() if k.endswith(".pt"))
    assert saved == [b"rank 0", b"rank 1"], {k: v[:200] for k, v in stored.items()}
