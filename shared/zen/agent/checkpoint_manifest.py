"""A checkpoint's manifest (``LATEST.json``, ``zen.agent.checkpoint``) as one attempt reads and writes it: each write
only over the manifest this attempt last read or wrote (``ifGenerationMatch``). Which write wins when another attempt
wrote one since: a save's over an earlier attempt's (whose objects it then deletes), never over a later one's
(``checkpoint_objects.later``)."""

from __future__ import annotations

import json
from typing import Any, Callable

from zen.agent import checkpoint_objects
from zen.agent.staging import TransferError

WRITE_TRIES = 3  # a save's manifest written again after another attempt's was found over the one last read


class Manifest:
    """The manifest ``name`` (its whole object name) in ``bucket()``, and its generation as last read or written."""

    def __init__(self, bucket: Callable[[], Any], prefix: str, name: str, attempt: int) -> None:
        self._bucket, self._prefix, self._name, self._attempt = bucket, prefix, name, attempt
        self.generation: int | None = None  # as last read or written (0: none); None: unknown

    def read(self) -> dict[str, Any] | None:
        """The manifest (``checkpoint_objects.checked``), or None when there is none."""
        blob = self._bucket().get_blob(self._name)
        self.generation = int(blob.generation) if blob is not None else 0
        return None if blob is None else checkpoint_objects.checked(json.loads(blob.download_as_bytes()))

    def write(self, manifest: dict[str, Any]) -> bool:
        """``manifest`` written over the one last read or written; False when another was written since (412)."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket().blob(self._name)
        try:
            blob.upload_from_string(json.dumps(manifest), content_type="application/json",
                                    if_generation_match=self.generation)
        except PreconditionFailed:
            return False
        self.generation = int(blob.generation) if blob.generation is not None else None
        return True

    def write_over(self, manifest: dict[str, Any]) -> list[str]:
        """A save's ``manifest``, over another attempt's written since when that attempt is an earlier one: returns
        the objects of that attempt's save (deleted once this one lands); a later attempt's: ``TransferError``."""
        overwritten: list[str] = []
        for _ in range(WRITE_TRIES):
            if self.write(manifest):
                return overwritten
            found = self._bucket().get_blob(self._name)
            other = json.loads(found.download_as_bytes()) if found is not None else {}
            same_save = (isinstance(other, dict) and other.get("generation") == manifest.get("generation")
                         and other.get("attempt") == manifest.get("attempt"))
            if same_save:  # a retried upload whose first try landed (its answer lost)
                self.generation = int(found.generation)
                return overwritten
            if (words := checkpoint_objects.later(other, self._attempt)) is not None:
                raise TransferError(words) from None
            self.generation = int(found.generation) if found is not None else 0
            try:  # its objects, deleted once this save lands (a manifest no save wrote: none)
                overwritten = checkpoint_objects.objects_of(self._prefix, other)
            except (AttributeError, KeyError, TypeError, ValueError):
                overwritten = []
        raise TransferError("the manifest kept changing while it was written")
