"""A save's manifest write that the client gave up on (its timeout, its retries spent) while the request was still on
its way to Cloud Storage, which stores it afterwards (its precondition still holds: no one wrote since). The save is
reported dropped, but its LATEST.json lands later: the files it names must still be there, or the next attempt finds
the checkpoint gone and starts afresh (the save before it was still whole, and its files are still in the bucket).
Against the storage stand-in (the request really held in it), through the official client; only what the writer
hears is changed."""

from __future__ import annotations

import threading

import pytest
import requests

from tests.agent.test_checkpoint import PREFIX, attempt, client, manifest, names  # noqa: F401 (client: a fixture)
from tests.agent.test_checkpoint_dropped import manifest_write_wrapped, restored
from zen.agent.checkpoint import MANIFEST
from zen.agent.staging import TransferError


def test_a_manifest_the_client_gave_up_on_that_lands_later_names_files_that_are_there(tmp_path, client, storage):
    lost = attempt(tmp_path, client, 1)  # taken for lost by Zen, or simply ending: the same for its files
    (lost.directory / "model.pt").write_text("epoch 1")
    assert lost.save("every 600 s")
    (lost.directory / "model.pt").write_text("epoch 2")

    held, landing = storage.state.hold(PREFIX + MANIFEST, "store"), list[threading.Thread]()

    def gave_up(upload, args, kwargs):  # the request goes; the client hears nothing back in time
        landing.append(threading.Thread(target=upload, args=args, kwargs=kwargs, daemon=True))
        landing[-1].start()
        assert held.reached.wait(10)
        raise requests.exceptions.ReadTimeout("read timed out")

    undo = manifest_write_wrapped(client, gave_up, land_first=False)
    with pytest.raises(TransferError, match="read timed out"):
        lost.save("every 600 s")
    undo()
    held.release.set()  # Cloud Storage stores it now
    landing[0].join(10)
    assert manifest(client)["generation"] == "attempt-1/save-2/"

    text, lines = restored(tmp_path, client, 2)
    assert text == "epoch 2", (lines, names(client))
