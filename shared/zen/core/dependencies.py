"""Dependencies between jobs: a JobRequest's ``after: [ids]`` (jobs or arrays) and ``after_condition``.

``ok`` (the default, Slurm's ``afterok``): the job starts once every job it names SUCCEEDED (an array:
every task), and is CANCELLED, with the reason, as soon as one of them ends otherwise. ``any``
(``afterany``): it starts once every one has ended, however. Meanwhile it waits PENDING with a hold that
names what it waits for, counts as no demand for scaling and takes no place in its queue's line. Each id
must be a job or an array already known when the job is submitted (so no cycle can be made) that its
submitter may see (their own, or one they may stop as an admin). ``zen.jobs.dependencies`` keeps it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

# A job_id as zen.core.models.JOB_ID_PATTERN has it (that module imports this one).
JobIdText = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]

MAX_AFTER = 100
HOLD_PREFIX = "after: "  # a hold of dependencies (queries.sql finds these holds by it: waiting_after)


class AfterFields(BaseModel):
    """A JobRequest's dependency fields (mixed into ``zen.core.models.JobRequest``)."""

    after: list[JobIdText] | None = Field(default=None, min_length=1, max_length=MAX_AFTER, description=(
        "Jobs or arrays this job waits for (zen.core.dependencies)"))
    after_condition: Literal["ok", "any"] | None = Field(default=None, description=(
        "ok (default): start when all SUCCEEDED, cancelled if one does not; any: start when all ended"))

    def after_problem(self, job_id: str | None) -> str | None:
        if self.after is None and self.after_condition is not None:
            return "after_condition needs after (the jobs it waits for)"
        if self.after is not None and len(set(self.after)) != len(self.after):
            return "after: an id is named twice"
        if self.after is not None and job_id is not None and job_id in self.after:
            return f"after: job {job_id} cannot wait for itself"
        return None


def hold(waiting_for: list[str]) -> str:
    shown = ", ".join(waiting_for[:3]) + (f" and {len(waiting_for) - 3} more" if len(waiting_for) > 3 else "")
    return f"{HOLD_PREFIX}waiting for {shown}"


def is_after_hold(text: str | None) -> bool:
    return bool(text) and str(text).startswith(HOLD_PREFIX)


def verdict(condition: str, ended: dict[str, str | None]) -> tuple[str, str | None]:
    """What a waiting job does now, from each dependency's end (id -> SUCCEEDED/FAILED/CANCELLED, None:
    not ended): ("go", None), ("cancel", why) or ("wait", what it still waits for)."""
    waiting = [dep for dep, end in ended.items() if end is None]
    if condition == "ok":
        failed = [(dep, end) for dep, end in ended.items() if end is not None and end != "SUCCEEDED"]
        if failed:
            dep, end = failed[0]
            return "cancel", f"dependency {dep} ended {end} (after_condition ok: it needs every one SUCCEEDED)"
    if waiting:
        return "wait", hold(waiting)
    return "go", None
