"""On the local stack every stand-in VM's agent shares one work directory (``zen_dev.local.stack``:
``ZEN_AGENT_WORK_DIR=<home>/vms``), and a multi-node job's nodes run on two of those VMs
(docs/how-to/multi-node.md, "Try it locally"). Each node's attempt directory was named after the job and
attempt only, so both nodes of one gang attempt used the same one: each node's ``prepare`` emptied it under the
other, each node's job saw the other's files in ``ZEN_OUTPUT_DIR`` and uploaded them to its own ``node-<rank>/``,
and the first to finish removed the directory the other still used. A node's directory is its own now
(``zen.agent.staging.AttemptData.root``).

Through the real functions and two ``python -m zen.agent`` processes with one work directory, as
``zen local up`` runs them."""

from __future__ import annotations

import sys

import pytest
from google.cloud import storage as gcs

# Each node writes a file named after its rank, waits for the other node to have written its own, then
# lists what it sees in its ZEN_OUTPUT_DIR.
NODE = """
import os, time
out = os.environ['ZEN_OUTPUT_DIR']
rank = os.environ['ZEN_NODE_RANK']
with open(os.path.join(out, f'rank-{rank}.txt'), 'w') as f:
    f.write(rank)
time.sleep(3)
print('node', rank, 'sees', sorted(os.listdir(out)), flush=True)
"""


@pytest.fixture
def bucket(storage):
    client = gcs.Client()
    client.create_bucket("out-bkt")
    return client.bucket("out-bkt")


def test_the_nodes_of_a_gang_on_one_machine_keep_their_outputs_apart(scheduler, agents, storage, bucket, tmp_path):
    shared = str(tmp_path / "vms")  # what zen local up gives every stand-in VM
    agents.start("vm-a", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=shared)
    agents.start("vm-b", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=shared)
    scheduler.submit("pair", [sys.executable, "-c", NODE], nodes=2, outputs="gs://out-bkt/runs")

    job = scheduler.wait_status("pair", "SUCCEEDED", "FAILED", "LOST", timeout_s=90)

    uploaded = sorted(blob.name for blob in bucket.list_blobs(prefix="runs/pair/"))
    assert uploaded == ["runs/pair/attempt-1/node-0/_ZEN_OUTPUTS.json", "runs/pair/attempt-1/node-0/rank-0.txt",
                        "runs/pair/attempt-1/node-1/_ZEN_OUTPUTS.json", "runs/pair/attempt-1/node-1/rank-1.txt"], (
        job.status, job.message, uploaded)
