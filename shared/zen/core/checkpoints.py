"""Checkpoints: a job's ``checkpoint:`` field, what its start message carries, and the configuration's
``checkpoints:`` section. Where a checkpoint lives in Cloud Storage (one prefix per job, under its
cluster's, so each cluster's agents reach only their own): ``checkpoint_uri``. The agent's side:
``zen.agent.checkpoint``; the user's: docs/how-to/checkpoints.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from zen.core.cluster_config import Strict
from zen.core.gcs import bucket_problem

MIN_EVERY_S = 30  # a save every few seconds would spend the VM's bandwidth on copies of copies
MAX_EVERY_S = 7 * 24 * 3600
GIB = 1024**3


class CheckpointSpec(BaseModel):
    """A job's ``checkpoint:``: ``ZEN_CHECKPOINT_DIR`` is restored before each attempt and saved every
    ``every`` seconds, when the VM is about to go away (a spot preemption's notice, a shutdown) and when the
    attempt ends."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    every: int = Field(default=600, ge=MIN_EVERY_S, le=MAX_EVERY_S,
                       description="Seconds between periodic saves of ZEN_CHECKPOINT_DIR")

    @model_validator(mode="before")
    @classmethod
    def _a_mapping(cls, data: Any) -> Any:
        if not isinstance(data, (dict, CheckpointSpec)):  # pydantic's words named this class, not the field's form
            raise ValueError(f"Input should be an object (a mapping) such as {{every: 600}}: seconds between saves, "
                             f"{MIN_EVERY_S} to {MAX_EVERY_S}; {{}} saves every 600 s; not {str(data)[:40]}")
        return data


class StartCheckpoint(BaseModel):
    """A start message's ``checkpoint``: where the job's checkpoint lives and the bounds on saving it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    uri: str = Field(max_length=1100, description="gs://BUCKET/PREFIX/<cluster>/<job_id>/, ending with '/'")
    every: int = Field(ge=1, le=MAX_EVERY_S)
    max_bytes: int = Field(ge=1, description="A larger ZEN_CHECKPOINT_DIR is not saved; the previous one is kept")


class CheckpointConfig(Strict):
    """The configuration's ``checkpoints:``. No bucket: jobs that ask for a checkpoint are refused."""

    bucket: str | None = Field(default=None, description="The bucket jobs' checkpoints are saved in")
    prefix: str = Field(default="checkpoints", pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$",
                        description="Under it, one prefix per cluster, then one per job")
    max_bytes: int = Field(default=5 * GIB, ge=1, description="Largest checkpoint saved (bytes)")

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and (problem := bucket_problem(value)):
            raise ValueError(problem)
        return value

    def uri(self, cluster: str, job_id: str) -> str | None:
        return checkpoint_uri(self.bucket, self.prefix, cluster, job_id) if self.bucket else None

    def start(self, spec: CheckpointSpec, cluster: str, job_id: str) -> StartCheckpoint | None:
        uri = self.uri(cluster, job_id)
        return StartCheckpoint(uri=uri, every=spec.every, max_bytes=self.max_bytes) if uri else None


def checkpoint_uri(bucket: str, prefix: str, cluster: str, job_id: str) -> str:
    """``gs://<bucket>/<prefix>/<cluster>/<job_id>/``: the job's checkpoints, every attempt's."""
    return f"gs://{bucket}/{prefix}/{cluster}/{job_id}/"
