"""A restore writes the manifest as its attempt's, a claim naming no save where it finds none
(``checkpoint_objects.claim``): an account that may read the job's prefix but not write it is refused that write. The
attempt failed asking whether the agents' account may *read* the prefix, which it could: the words now ask for both,
and name the file that grants them (terraform/checkpoints.tf). The official client against the Cloud Storage stand-in,
refusing the manifest's uploads with a 403."""

from __future__ import annotations

import threading
import time

import pytest

from tests.agent.test_checkpoint import attempt
from tests.agent.test_checkpoint import client  # noqa: F401 - fixture
from zen.agent.checkpoint import MANIFEST
from zen.agent.staging import Progress, TransferError, Unavailable


def test_a_restore_refused_its_claims_write_asks_for_write_rights(tmp_path, client, storage):  # noqa: F811
    storage.state.outage(MANIFEST, 3600, code=403)  # every upload of the manifest refused, reads answered
    first = attempt(tmp_path, client, 1)
    with pytest.raises(TransferError) as refused:
        first.restore(Progress(), threading.Event(), refused_until=time.monotonic())  # asked no more
    assert not isinstance(refused.value, Unavailable)
    assert "may the agents' account read and write this prefix? terraform/checkpoints.tf" in str(refused.value), str(refused.value)
