"""The configuration's ``limits`` and ``attempts`` sections (``Limits``, ``Attempts``): how large a message, how long a
job and how many tasks an array may be, and a job's attempt budget; with the ceilings Google Cloud and Zen's own
columns put on them (``CEILINGS``), checked at load. A limit above its ceiling loaded, was taken at submission, and
then failed where its user could not see why: docs/reference/configuration.md#limits.

``limits.max_array_tasks`` has none of its own: one array is made in one transaction of ``on_job_submitted``, whose
timeout and memory are terraform's (``functions``), not this file's; the reference gives the arithmetic.
"""

from __future__ import annotations

from functools import partial

from pydantic import Field, ValidationInfo, field_validator, model_validator

from zen.core.cluster_config import Strict
from zen.core.models import INT32_MAX

# Google's limit on an Eventarc event given to a 2nd gen Cloud Run function, which cannot be raised ("512KB for
# Eventarc events": cloud.google.com/functions/quotas; Eventarc's "Event size: 512 KB"). KB as Google's clients
# read Pub/Sub's "10 MB" (10 * 1000 * 1000, google.cloud.pubsub_v1.publisher._batch.thread).
EVENTARC_EVENT_BYTES = 512_000
# The event carries a message's payload base64-encoded (4 bytes for each 3), beside its attributes and the event's own
# fields: room for Zen's largest (an agent's heartbeat: its VM's token in up to 16 attributes of 1,000 characters, its
# key and signature; a submission's token in up to 8), and for the event's ids, times, topic and subscription.
EVENT_ROOM = 24_000
# The largest payload whose event fits (366,000 bytes): a larger one passed this limit, `zen submit` checked it and
# published it, and its event was never given to on_job_submitted, which neither took the job nor refused it.
MAX_MESSAGE_BYTES = (EVENTARC_EVENT_BYTES - EVENT_ROOM) // 4 * 3

# A job's attempt budget: its max_attempts column is a Postgres integer, and every attempt that does not count (a
# preemption, a retry, a gang's reassembly) raises the budget by one, unspent. At the integer's largest, that write
# was refused and a preempted job never went back to the queue; a million attempts leaves room for all of them.
MOST_ATTEMPTS = 1_000_000
ATTEMPTS_ROOM = ("the most a job's max_attempts column (a Postgres integer) may start at and keep room for the one "
                 "it grows by at every attempt that does not count (a preemption, a retry, a gang's reassembly)")

# section.field -> (the most it may be, why): what a refusal at load says.
CEILINGS: dict[str, tuple[int, str]] = {
    "limits.max_message_bytes": (MAX_MESSAGE_BYTES, (
        "the largest payload whose Eventarc event (the payload base64-encoded, with its attributes) fits the 512 KB "
        "Google gives a 2nd gen Cloud Run function (not raisable): Zen's functions receive submissions, stops and "
        "heartbeats as such events, and a larger message this limit let through (zen submit checks it before "
        "publishing) would never reach them")),
    "limits.max_runtime_s": (INT32_MAX, "the largest a job's max_runtime_s column holds (a Postgres integer)"),
    "attempts.default_max_attempts": (MOST_ATTEMPTS, ATTEMPTS_ROOM),
    "attempts.max_max_attempts": (MOST_ATTEMPTS, ATTEMPTS_ROOM),
}


def at_most(section: str, field: str, value: int) -> int:
    """``value``, or ``ValueError`` naming its ceiling and why (the field is named by where pydantic found it)."""
    most, why = CEILINGS[f"{section}.{field}"]
    if value > most:
        raise ValueError(f"{value} is above {most}, {why}")
    return value


def ceiling(section: str, value: int, info: ValidationInfo) -> int:
    """``at_most`` for the field a validator of ``section`` is checking."""
    assert info.field_name is not None
    return at_most(section, info.field_name, value)


class Attempts(Strict):
    default_max_attempts: int = Field(default=3, ge=1)
    max_max_attempts: int = Field(default=10, ge=1, description="Cap on a request's max_attempts")

    _ceiling = field_validator("default_max_attempts", "max_max_attempts")(partial(ceiling, "attempts"))

    @model_validator(mode="after")
    def _order(self) -> "Attempts":
        if self.default_max_attempts > self.max_max_attempts:
            raise ValueError("default_max_attempts is above max_max_attempts")
        return self


class Limits(Strict):
    max_message_bytes: int = Field(default=64 * 1024, gt=0, description="Larger payloads are rejected")
    max_runtime_s: int = Field(default=7 * 24 * 3600, gt=0,
                               description="Cap on a job's max_runtime_s, and its value when it gives none")
    max_array_tasks: int = Field(default=1000, gt=0, description="Most tasks one array submission may have")

    _ceiling = field_validator("max_message_bytes", "max_runtime_s")(partial(ceiling, "limits"))
