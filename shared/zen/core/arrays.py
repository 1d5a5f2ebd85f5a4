"""Job arrays: one submission of N tasks (a JobRequest's ``array:``), each a job of its own.

A request with ``array: {count: 50}`` (or ``params:``, one mapping of environment variables per task)
becomes jobs ``<array id>-0`` .. ``<array id>-(N-1)``, the array id being the request's job_id. Each task's
request is the array's with ``array`` replaced by the task's place (``{id, index, count, max_parallel}``)
and its environment given ``ZEN_ARRAY_ID``, ``ZEN_ARRAY_INDEX``, ``ZEN_ARRAY_COUNT`` and the task's
parameters. With ``max_parallel: K`` at most K tasks are let go at once (the others wait PENDING with a
``hold`` that says why; the next in index order is let go when one ends: ``zen.jobs.arrays``). The
user's side: docs/how-to/arrays-and-pipelines.md.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from zen.core.secrets import EnvName, zens_names

MAX_JOB_ID = 128  # a job_id's length (zen.core.models.JOB_ID_PATTERN): a task's id is its array's and "-<index>"
RESERVED_PREFIX = "ZEN_"
HOLD_PREFIX = "array "  # a hold of max_parallel (queries.sql finds these holds by it: array_next_held)


class ArraySpec(BaseModel):
    """A JobRequest's ``array:``: how many tasks, or one parameter set per task, and how many at once."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    count: int | None = Field(default=None, ge=1, description="Number of tasks (with params: their number)")
    params: list[dict[EnvName, Annotated[str, Field(max_length=4096)]]] | None = Field(
        default=None, min_length=1, description="One mapping of environment variables per task, in index order")
    max_parallel: int | None = Field(default=None, ge=1, description="Most tasks let go at once (unset: all)")

    @model_validator(mode="after")
    def _size(self) -> "ArraySpec":
        if self.count is None and self.params is None:
            raise ValueError("give count (the number of tasks) or params (one mapping per task)")
        if self.count is not None and self.params is not None and self.count != len(self.params):
            raise ValueError(f"count is {self.count} but params has {len(self.params)} entries: give one of them")
        for i, params in enumerate(self.params or ()):
            reserved = sorted(name for name in params if name.upper().startswith(RESERVED_PREFIX))
            if reserved:
                raise ValueError(f"params[{i}]: {', '.join(reserved)}: names starting with {RESERVED_PREFIX} are Zen's")
        return self

    @property
    def size(self) -> int:
        return self.count if self.count is not None else len(self.params or ())


def task_id(array_id: str, index: int) -> str:
    return f"{array_id}-{index}"


def check_array(array_id: str, spec: ArraySpec, max_tasks: int, env: dict[str, str], secrets: dict[str, str]) -> str | None:
    """Why the array cannot be accepted as it is (None: it can). ``array_id`` is a valid job_id already."""
    if spec.size > max_tasks:
        return f"array: {spec.size} tasks, more than this Zen's limits.max_array_tasks ({max_tasks})"
    longest = task_id(array_id, spec.size - 1)
    if len(longest) > MAX_JOB_ID:
        return (f"array: its tasks' ids ({longest!r}) would be longer than a job_id may be (128 characters): "
                "give a shorter job_id")
    for i, params in enumerate(spec.params or ()):
        if taken := zens_names(params):  # as env's (JobRequest): a gang's nodes would find Zen's value instead
            return f"array.params[{i}]: {taken}"
        clash = sorted(set(params) & set(secrets))
        if clash:
            return f"array.params[{i}]: {', '.join(clash)} is also a secret's variable: give it one source"
    return None


def tasks(canonical: dict[str, Any], array_id: str, spec: ArraySpec) -> list[tuple[str, dict[str, Any]]]:
    """(task job_id, its canonical request) for each task, in index order."""
    base = {key: value for key, value in canonical.items() if key != "array"}
    out = []
    for index in range(spec.size):
        tid = task_id(array_id, index)
        env = dict(base.get("env") or {})
        env.update((spec.params or [{}] * spec.size)[index])
        env.update(ZEN_ARRAY_ID=array_id, ZEN_ARRAY_INDEX=str(index), ZEN_ARRAY_COUNT=str(spec.size))
        place = {"id": array_id, "index": index, "count": spec.size}
        if spec.max_parallel is not None:
            place["max_parallel"] = spec.max_parallel
        out.append((tid, {**base, "job_id": tid, "env": env, "array": place}))
    return out


def place_of(request: dict[str, Any]) -> dict[str, Any] | None:
    """A task's place in its array (``{id, index, count[, max_parallel]}``), None for a job of no array."""
    place = request.get("array")
    return place if isinstance(place, dict) and "id" in place else None


def name_key(job_id: str, request: dict[str, Any]) -> str:
    """The name a job's row holds in the one namespace of jobs' and arrays' ids: its id, but its array's for
    an array's task 0 (so a job X and an array X collide; the store's jobs_one_namespace)."""
    place = place_of(request)
    return place["id"] if place and job_id == task_id(place["id"], 0) else job_id


def hold_reason(array_id: str, max_parallel: int) -> str:
    return f"{HOLD_PREFIX}{array_id} lets {max_parallel} task{'s' if max_parallel != 1 else ''} run at once"
