"""``zen submit``'s arrays and dependencies (docs/how-to/arrays-and-pipelines.md): an array's parameter file,
its checks and its publication, and the jobs ``--after`` names, waited for a little and checked before
publishing; ``zen stop``'s look at an array's tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import yaml

from zen.cli import identity
from zen.cli.kit import CliError, database, database_configured
from zen.cli.publish import NotPublished
from zen.core.arrays import check_array, task_id, tasks
from zen.core.config import load_config
from zen.core.models import JobRequest, request_fingerprint


def read_params(path: str) -> list:
    """An array's parameter sets from the YAML or JSON file ``path``: a list of mappings (variable -> value), one
    per task, each value as the file writes it (they go into the tasks' environment as text: read as YAML 1.1
    numbers and booleans, ``SEED: 010`` was ``8``, ``WARMUP: 1:30`` was ``90``, JSON ``true`` was ``True``)."""
    def as_written(value: Any) -> Any:  # JSON's literals as JSON writes them; its numbers' text is kept
        return json.dumps(value) if value is None or isinstance(value, bool) else value

    try:
        text = Path(path).read_text()
        data = (json.loads(text, parse_float=str, parse_int=str, parse_constant=str) if path.endswith(".json")
                else yaml.load(text, Loader=yaml.BaseLoader))  # every scalar as its text
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise CliError(f"--array-params {path}: cannot read it as {'JSON' if path.endswith('.json') else 'YAML'}: "
                       f"{str(exc).splitlines()[0]}", 2) from None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise CliError(f"--array-params {path}: expected a list of mappings (one per task: NAME: value)", 2)
    for n, item in enumerate(data):
        if nested := next((k for k, v in item.items() if isinstance(v, (list, dict))), None):
            raise CliError(f"--array-params {path}: entry {n}: {nested} is a list or mapping, not a value", 2)
    return [{str(k): str(as_written(v)) for k, v in item.items()} for item in data]


def submit_array(request: JobRequest, array_id: str, cluster: str, regions: list[str], sender, wait: bool,
                 publish: Callable[..., str], taken: Callable[[list[str]], list[str]],
                 existing: Callable[[], list] = lambda: []) -> int:
    """Publish an array (one message, N tasks: ``zen.core.arrays``) after the checks a job gets. ``taken``:
    those of the ids given that a job or an array holds (none when the database cannot be read); ``existing``:
    the tasks of an array ``array_id`` (a retry of a publish that got through finds its own: nothing runs twice)."""
    assert request.array is not None
    if wait:
        raise CliError(f"--wait follows one job; an array's tasks are followed one by one: zen logs {array_id}-0 -f", 2)
    size = request.array.size
    if problem := check_array(array_id, request.array, load_config().limits.max_array_tasks, request.env,
                              dict(request.secrets or {})):
        raise CliError(f"Zen would refuse this array: {problem}. Not published", 1)
    held = set(taken([array_id] + [task_id(array_id, index) for index in range(size)]))
    made = {tid: request_fingerprint(r) for tid, r in tasks(request.canonical(array_id), array_id, request.array)}
    there = ({task.job_id: task.request_hash for task in existing()}
             if array_id in held or task_id(array_id, 0) in held else {})  # the array of that id, if any
    if there == made:
        raise CliError(f"array {array_id} already exists: the same request runs nothing new, each task runs once. Not "
                       f"published (retrying a submit whose publish failed? it got through: zen jobs list --array "
                       f"{array_id})", 1)  # it said to use a new job_id: a second array, every task run twice
    if there:  # another array of that id: it said "a job, or an array's tasks", which of them left to guess
        raise CliError(f"job_id {array_id} is taken by array {array_id} of another request ({len(there)} tasks: zen "
                       f"jobs list --array {array_id}): use a new job_id (or none: zen makes one). Not published", 1)
    if array_id in held or task_id(array_id, 0) in held:
        raise CliError(f"job_id {array_id} is taken (a job, or an array's tasks {array_id}-N): use a new job_id "
                       "(or none: zen makes one). Not published", 1)
    if held:  # the function would refuse the array whole
        first = min(held, key=lambda name: int(name.rsplit("-", 1)[1]))
        raise CliError(f"job_id {first} (task {first.rsplit('-', 1)[1]} of array {array_id}) is already another "
                       "job's or array's: use a new job_id (or none: zen makes one). Not published", 1)
    try:
        message_id = publish("job_submitted", request.to_bytes(), identity.attributes(sender))
    except NotPublished:  # refused outright: nothing went out
        raise
    except CliError as exc:  # it may have been published all the same (the answer lost): the same id, one array
        raise CliError(f"{exc}; array {array_id} may have been published all the same: to try again without "
                       f"making a second array, submit it again with --job-id {array_id}", exc.code) from None
    print(f"submitted array {array_id}: {size} tasks, {array_id}-0 .. {array_id}-{size - 1}"
          + (f", at most {request.array.max_parallel} at once" if request.array.max_parallel else "")
          + f", to cluster {cluster} (regions {', '.join(regions)}; message {message_id}) {identity.describe(sender)}",
          flush=True)
    print(f"  progress: zen jobs list --array {array_id}    why: zen explain {array_id}    stop: zen stop {array_id}")
    return 0


def await_dependencies(names: list[str], user: str, read_job: Callable[[str], Any], wait_s: float = 15.0,
                       condition: str = "ok") -> None:
    """Each job or array ``--after`` names, known to the database before publishing and one ``user`` may wait
    for: one submitted a moment ago may not be stored yet (Pub/Sub does not order messages), so wait for it
    a little; ``CliError`` when it stays unknown or is another's, or has ended so that the job could never
    start under ``condition`` (the function would refuse the job). Without a readable database, the function
    decides."""
    import time

    from zen.core.dependencies import verdict
    from zen.jobs.authorization import may_stop

    if not names or not database_configured():
        return
    deadline = time.monotonic() + wait_s
    ends: dict[str, str | None] = {}
    for name in names:
        while True:
            try:
                job = read_job(name)
                tasks = [job] if job is not None else read_array(name)
                if tasks:
                    if refused := may_stop(load_config(), user, tasks[0]):
                        raise CliError(f"--after {name}: {refused.replace('may not stop', 'may not wait for')}. "
                                       "Not published", 1)
                    ended = [t.status.value for t in tasks if t.status.terminal]
                    ends[name] = None if len(ended) < len(tasks) else next(
                        (end for end in ended if end != "SUCCEEDED"), "SUCCEEDED")  # an array: every task's
                    break
            except (CliError, KeyboardInterrupt):
                raise
            except Exception:  # noqa: BLE001 - a check only: the function decides
                return
            if time.monotonic() > deadline:
                raise CliError(f"--after {name}: no job or array {name} is known (waited {wait_s:.0f} s for it to be "
                               "stored): submit it first. Not published", 1)
            time.sleep(0.5)
    action, why = verdict(condition, ends)
    if action == "cancel":
        raise CliError(f"--after: {why}: this job could never start. Not published", 1)


def read_array(array_id: str) -> list:
    """The tasks of the array of that id (none: no array has it)."""
    from zen.store.jobstore import PostgresJobTx

    db = database()
    try:
        with db.transaction() as session:
            return PostgresJobTx(session).array_tasks(array_id)
    finally:
        db.close()
