"""A gang's nodes save their checkpoints at once, each under ``node-<rank>/`` of the job's prefix
(docs/how-to/multi-node.md). The node's prefix was only in ``Checkpoint.spec.uri``: its objects and LATEST.json went
to the job's prefix, shared by every node. Two ranks saving ``state.pt`` in the same attempt wrote the same object
(``attempt-<n>/save-1/state.pt``, last upload kept), and the second rank's manifest write, refused (412), read the
first's LATEST.json (same attempt, same save name) as its own save landed: the manifest named rank 0's file with rank
1's bytes, and every rank of the rerun restored that one checkpoint. Against the storage stand-in, through the
official client."""

from __future__ import annotations

import threading

from tests.agent.test_checkpoint import PREFIX, URI, client, names  # noqa: F401 (client: a fixture)
from zen.agent.checkpoint import MANIFEST, Checkpoint
from zen.agent.staging import Progress
from zen.core.checkpoints import StartCheckpoint


def node(tmp_path, client, attempt: int, rank: int) -> Checkpoint:
    checkpoint = Checkpoint(StartCheckpoint(uri=URI, every=600, max_bytes=10**6),
                            tmp_path / f"attempt-{attempt}-node-{rank}", attempt, lambda: client, node=rank)
    checkpoint.prepare()
    checkpoint.restore(Progress(), threading.Event())
    return checkpoint


def test_each_rank_of_a_gang_restores_the_state_it_saved_not_another_ranks(tmp_path, client):
    ranks = [node(tmp_path, client, 1, rank) for rank in (0, 1)]
    for rank, checkpoint in enumerate(ranks):  # each rank's own state, named alike (as one file per rank is)
        (checkpoint.directory / "state.pt").write_text(f"rank {rank} at step 500")
    for checkpoint in ranks:
        assert checkpoint.save("every 600 s")

    rerun = [node(tmp_path, client, 2, rank) for rank in (0, 1)]
    restored = [(checkpoint.directory / "state.pt").read_text() for checkpoint in rerun]
    assert restored == ["rank 0 at step 500", "rank 1 at step 500"], names(client)
    assert PREFIX + MANIFEST not in names(client)  # one manifest a node, none shared
    assert {PREFIX + f"node-{rank}/" + MANIFEST for rank in (0, 1)} <= set(names(client))
