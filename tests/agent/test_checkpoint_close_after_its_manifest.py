"""The attempt's end (``Checkpoint.close``, once the last save's transfer is over or cut) waits for a save's manifest
being written; once it returns, what the checkpoint says of itself (``latest_why``, ``kept``, ``saves``) is what the
final report tells the user (``AttemptRunner._save_last``: the last save "is the latest", or "the previous checkpoint
is kept", or "no checkpoint was saved: the next attempt starts afresh"). A save whose manifest landed must be told as
saved: the next attempt restores it. The save's thread recorded it only after letting ``close`` go, and for a checkpoint
of many files that took seconds (each of its N object names looked up in a set of N made again), so a report cut as
the manifest landed said the previous checkpoint was kept while the rerun resumed from the last save. Against the
storage stand-in, through the official client: the attempt ends just as the save's transfer says it is over."""

from __future__ import annotations

import threading
from typing import Any, Callable

from tests.agent.test_checkpoint import attempt, client, manifest  # noqa: F401 (client: a fixture)
from zen.agent.lastsave import END_SAVE
from zen.agent.staging import Progress


class EndsWithItsTransfer(Progress):
    """A save's progress whose end (its transfer over: what the attempt's thread waits for) is when the attempt ends:
    the attempt's thread runs ``end`` (``close``, then reads what was saved) at that very moment."""

    def __init__(self, end: Callable[[], None]) -> None:
        super().__init__()
        self.end: Callable[[], None] | None = end

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "ended" and value is not None and getattr(self, "end", None) is not None:
            end, self.end = self.end, None
            ends = threading.Thread(target=end)
            ends.start()
            ends.join(10)


def test_a_last_save_whose_manifest_landed_as_the_attempt_ended_is_told_as_the_latest(tmp_path, client):
    ending = attempt(tmp_path, client, 1)
    (ending.directory / "model.pt").write_text("epoch 1")
    assert ending.save("every 600 s")
    (ending.directory / "model.pt").write_text("epoch 2, at SIGTERM")  # the job's last state, written as it stopped
    told: list[tuple[bool, str | None, int, bool]] = []
    ending.saved = EndsWithItsTransfer(lambda: told.append((ending.close(), ending.latest_why, ending.saves,
                                                            ending.kept)))

    assert ending.save(END_SAVE, threading.Event())
    assert manifest(client)["generation"] == "attempt-1/save-2/"  # what the next attempt restores
    assert told == [(True, END_SAVE, 2, True)], f"told {told}: the report would say the previous checkpoint is kept"


def test_a_first_save_whose_manifest_landed_as_the_attempt_ended_is_not_told_afresh(tmp_path, client):
    ending = attempt(tmp_path, client, 1)
    (ending.directory / "model.pt").write_text("epoch 1, at SIGTERM")
    told: list[tuple[bool, str]] = []
    ending.saved = EndsWithItsTransfer(lambda: told.append((ending.close(), ending.left())))

    assert ending.save(END_SAVE, threading.Event())
    assert manifest(client)["generation"] == "attempt-1/save-1/"
    assert told == [(True, "the previous one is kept")], f"told {told}"
