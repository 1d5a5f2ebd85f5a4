"""``zen logs JOB [--attempt N] [-f]`` and ``zen submit --wait``: a job's output, as it runs.

It reads the local stack's output or Cloud Logging (``zen.adapters.cloud_logging.reader_from_env``)
and, with ``-f``, the job's status from Postgres, printing lines until the job has ended and its last
attempt's final entry was read; then it exits with the job's exit code. ``zen submit --wait`` follows
only the request and the message it published. What it prints, when it stops, its timings and exit
codes: docs/reference/cli.md. It never starts a database (``zen.cli.kit.database``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Iterator, TextIO

from zen.adapters.cloud_logging import reader_from_env
from zen.adapters.joblogs import OutputEntry, Reader, SinkError
from zen.cli.kit import CliError, Context, credentials_problem, fail, positive, shown
from zen.core.errors import TransientError, ZenError
from zen.core.models import Job, JobStatus

APPEAR_TIMEOUT_S = 60.0  # a submitted job shows up in the database within seconds
WAIT_NOTE_S = 3.0  # an id still unknown this long is said to be waited for (a mistyped one otherwise waited in silence)
POLL_S = 0.5
CLOUD_POLL_S = 5.0  # Cloud Logging allows a project about one read a second: one per attempt per 5 s
PATIENCE_S = 120.0  # reads that keep failing this long end the follow (one failure only waits)
READ_TIMEOUT_S = 30.0  # a status read unanswered this long is given up on (unless ZEN_DB_QUERY_TIMEOUT_S says)


def format_entry(entry: OutputEntry, style: str) -> str:
    if style == "json":
        return entry.to_json()
    if style == "raw":
        return entry.text
    return f"[{entry.attempt} {entry.vm} {entry.stream}] {entry.text}"


def exit_code_of(job: Job) -> int:
    if job.status is JobStatus.SUCCEEDED:
        return job.exit_code or 0
    return job.exit_code if job.exit_code else 1


class JobStatusSource:
    """The job's row and its rejection, from Postgres (``zen.store``)."""

    def __init__(self, db=None):
        if db is None:  # never starts or creates one (a user of a deployed Zen has no local stack)
            from zen.cli.kit import database

            db = database()
            if db.query_timeout_s is None:  # a link gone silent (a Wi-Fi change, a sleep) held the follow for ever
                db.query_timeout_s = READ_TIMEOUT_S
        self._db = db

    def job(self, job_id: str) -> Job | None:
        from zen.store import repository

        with self._db.transaction() as session:
            return repository.get_job(session, job_id)

    def rejection(self, job_id: str, message_id: str | None = None) -> str | None:
        """The latest refusal of ``job_id`` (of that message only, with ``message_id``)."""
        from zen.store import repository

        with self._db.transaction() as session:
            row = repository.latest_rejection(session, job_id, message_id)
        return row["reason"] if row else None

    def missing(self, job_id: str, otherwise: str) -> str:
        """``no job ...`` with Zen's latest refusal of a message naming it, if any (``zen.cli.kit.no_job``)."""
        from zen.cli.kit import no_job

        with self._db.transaction() as session:
            return no_job(session, job_id, otherwise)


def follow(job_id: str, reader: Reader, status: JobStatusSource, *, attempt: int | None = None,
           style: str = "labelled", out: TextIO = sys.stdout, err: TextIO = sys.stderr, poll_s: float = POLL_S,
           settle_s: float = 5.0, appear_timeout_s: float = APPEAR_TIMEOUT_S,
           clock: Callable[[], float] = time.monotonic, message_id: str | None = None,
           request_hash: str | None = None, give_up_s: float | None = None) -> int:
    """Print the job's output until it ends; return its exit code (see the module docstring;
    ``message_id`` and ``request_hash``: what ``zen submit --wait`` published). A job that has not
    appeared after ``appear_timeout_s`` ends ``zen logs -f`` (exit 1); a published one (``message_id``)
    is waited for on, after saying so once, until ``give_up_s`` (default: for ever): it may still arrive."""
    started = clock()
    told_late = told_waiting = False
    finals: set[int] = set()  # attempts read to their final entry: every node's, for a gang (zen.core.gang)
    ended: dict[int, set[str]] = {}  # attempt -> the VMs whose final entry was read
    last_state: tuple | None = None
    ended_at: float | None = None
    failing_since: float | None = None
    while True:
        try:
            job = status.job(job_id)
            if job is not None and request_hash is not None and job.request_hash != request_hash:
                job = None  # the id is another request's: the function refuses the one published
            if job is None:
                reason = status.rejection(job_id, message_id)
                if reason:
                    print(f"zen: job {job_id} was refused: {shown(reason)}", file=err)
                    return 1
                waited = clock() - started
                if message_id is None and waited > appear_timeout_s:
                    print(f"zen: no job {job_id} after {appear_timeout_s:g} s (`zen rejected` lists refused ones)",
                          file=err)
                    return 1
                if message_id is None and waited > WAIT_NOTE_S and not told_waiting:
                    told_waiting = True
                    print(f"zen: no job {job_id} yet: waiting up to {appear_timeout_s:g} s for it to appear (check "
                          "the id with `zen jobs list`; Ctrl-C stops only this wait)", file=err, flush=True)
                if message_id is not None and waited > appear_timeout_s and not told_late:
                    told_late = True
                    print(late_note(job_id, message_id, appear_timeout_s), file=err, flush=True)
                if give_up_s is not None and waited > give_up_s:
                    print(f"zen: job {job_id} has not appeared after {give_up_s:g} s; its submission was published "
                          f"and may still arrive: `zen jobs get {job_id}`", file=err)
                    return 1
            changed = None
            if job is not None and (job.status, job.attempt) != last_state:
                where = f" on {job.vm}" if job.vm and job.status.holds_vm else ""
                changed = f"zen: {job_id} {job.status.value} (attempt {job.attempt}{where})"
                if not job.status.terminal:  # an end is told after the lines read with it, which came before it
                    last_state = (job.status, job.attempt)
                    print(changed, file=err, flush=True)
            attempts = [attempt] if attempt is not None else list(range(1, (job.attempt if job else 0) + 1))
            if job is not None and hasattr(reader, "expect_nodes"):
                reader.expect_nodes(job.nodes)
            # An attempt is read to its end at every node's final entry; one node's, read alone (``--node``).
            nodes = 1 if isinstance(reader, OneNode) or job is None else job.nodes
            got = False
            for number in attempts:  # each attempt's lines printed as read: a later read may fail
                if number in finals:  # read to its final entry: nothing more (a read spends quota)
                    continue
                # An attempt before the job's current one is read to the listing's end before the next: read
                # READ_PAGES pages a poll, its tail came after the next attempt's head, or never (the job's end).
                earlier = job is not None and number < job.attempt
                for batch in _batches(reader, job_id, number, to_the_end=earlier, flush=False):
                    for entry in batch:
                        got = True
                        print(format_entry(entry, style), file=out)
                        if entry.final:
                            ended.setdefault(entry.attempt, set()).add(entry.vm)
                            if len(ended[entry.attempt]) >= nodes:
                                finals.add(entry.attempt)
                    out.flush()
            if changed is not None and job is not None and job.status.terminal:
                last_state = (job.status, job.attempt)
                print(changed, file=err, flush=True)
        except (SinkError, TransientError) as exc:  # a throttled or failed read: the job may be fine
            if failing_since is None:  # said at once: a stopped stack or database otherwise showed nothing for 120 s
                print(f"zen: cannot read job {job_id} now ({exc}); trying again for up to {PATIENCE_S:g} s "
                      "(Ctrl-C stops only this wait, not the job)", file=err, flush=True)
            failing_since = failing_since if failing_since is not None else clock()
            if clock() - failing_since >= PATIENCE_S:
                raise TransientError(f"lost track of job {job_id} ({exc}); it may still be running: "
                                     f"`zen jobs get {job_id}`") from None
            time.sleep(poll_s)
            continue
        failing_since = None
        if job is not None and job.status.terminal:
            target = attempt if attempt is not None else job.attempt
            # The settle time counts from a read that brought nothing: a long output is read page by page.
            ended_at = None if got else (ended_at if ended_at is not None else clock())
            never_on_a_vm = job.started_at is None and job.vm is None  # (stopped while staging: it was)
            if target in finals or never_on_a_vm or (ended_at is not None and clock() - ended_at >= settle_s):
                return exit_code_of(job)
        time.sleep(poll_s)


def late_note(job_id: str, message_id: str, waited_s: float) -> str:
    return (f"zen: job {job_id} was published (message {message_id}) but is not in the database after {waited_s:g} s; "
            "it may still arrive (Pub/Sub delivers it again until the function takes it). Still waiting: "
            f"Ctrl-C stops only this wait, not the job; see it later with `zen logs -f {job_id}` or "
            f"`zen jobs get {job_id}` (submitting it again could make a second job)")


def _batches(reader: Reader, job_id: str, attempt: int | None, to_the_end: bool,
             flush: bool = True) -> Iterator[list[OutputEntry]]:
    """The reader's new entries, a batch at a time: from Cloud Logging one page per batch, paced and
    retried when throttled (``CloudReader.read``); ``to_the_end``: all there is now (one attempt is
    otherwise read ``cloud_logging.READ_PAGES`` pages a call), with the lines past a gap too unless not
    ``flush`` (they then wait for the missing one: ``cloud_logging.SETTLE_S``)."""
    read = getattr(reader, "read", None)
    if read is not None:
        yield from (read(job_id, attempt, most=None, flush=flush) if to_the_end else read(job_id, attempt))
        return
    batch = reader.new_entries(job_id, attempt)
    while batch:
        yield batch
        batch = reader.new_entries(job_id, attempt) if attempt is not None and to_the_end else []


def print_once(job_id: str, reader: Reader, attempt: int | None, style: str, out: TextIO, err: TextIO) -> int:
    printed = 0
    for batch in _batches(reader, job_id, attempt, to_the_end=True):  # printed as read: a long output is long to read
        for entry in batch:
            print(format_entry(entry, style), file=out)
        printed += len(batch)
        out.flush()
    if not printed:
        print(f"zen: {_no_output(job_id, attempt)}", file=err)
        return 1
    return 0


def _array_note(job_id: str) -> str | None:
    """What ``zen logs`` says of an array's id (no job has it): where its tasks' output is."""
    from zen.cli import batches

    if batches.read_array(job_id):
        return f"{job_id} is an array: each task's output is under its own id (`zen logs {job_id}-0`, ...)"
    return None


def _array_id(job_id: str) -> str | None:
    """:func:`_array_note` where no job has the id; None also when the database cannot be read now (``follow``
    waits such a failure out: a blip must not end ``zen logs -f`` of a job)."""
    try:
        return _array_note(job_id) if JobStatusSource().job(job_id) is None else None
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _no_output(job_id: str, attempt: int | None) -> str:
    """Why a job has no output, from its row when the database can be read: no such job, no such attempt, not
    started yet (it said "not started yet?" of a job that does not exist, and of an attempt 2 of a job that ran once)."""
    which = f" attempt {attempt}" if attempt is not None else ""
    guess = f"no output for job {job_id}{which} (not started yet? see `zen jobs get {job_id}`)"
    from zen.cli.kit import database_configured

    if not database_configured():
        return guess
    try:
        job = (source := JobStatusSource()).job(job_id)
        if job is None:
            return _array_note(job_id) or source.missing(job_id, "check the id with `zen jobs list`")
    except Exception:  # noqa: BLE001 - the database cannot be read: the output's absence is all that is known
        return guess
    if job is not None and attempt is not None and attempt > job.attempt:
        return (f"job {job_id} has had {job.attempt} attempt{'s' * (job.attempt > 1)} ({job.status.value}): "
                f"no attempt {attempt}")
    current = attempt in (None, job.attempt) and (attempt is not None or job.attempt == 1)  # no earlier one ran
    if current and job.started_at is None and job.vm is None:
        when = "it ended before it ran" if job.status.terminal else "it has not run yet"  # never will, once ended
        return f"no output for job {job_id}{which}: {when} ({job.status.value}; `zen explain {job_id}`)"
    return guess



def _project() -> str:
    from zen.cli.kit import deployed_config

    return deployed_config().project


def open_reader() -> tuple[Reader, float, float]:
    """The reader for this environment, how long to wait for an attempt's final entry after the
    job's end (Cloud Logging shows entries a few seconds after they are written), and how often to read."""
    reader = reader_from_env(os.environ, _project())
    local = bool(os.environ.get("ZEN_JOB_LOGS_DIR"))
    return reader, (5.0 if local else 30.0), (POLL_S if local else CLOUD_POLL_S)


def _run(action: Callable[[], int]) -> int:
    """Run a command body, turning the failures a user can meet into one line (exit 1, or 130)."""
    try:
        return action()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except (SinkError, ZenError) as exc:
        return fail(str(exc), 1)
    except CliError as exc:  # no database configured, ...
        return fail(str(exc), exc.code)
    except Exception as exc:  # noqa: BLE001 - e.g. no Google credentials for Cloud Logging
        if why := credentials_problem(exc, NO_CREDENTIALS):
            return fail(why, 1)
        raise


class OneNode:
    """A reader of one VM's entries: a gang's node (``zen logs --node K``)."""

    def __init__(self, reader: Reader, vm: str):
        self._reader, self.vm = reader, vm
        if hasattr(reader, "read"):  # Cloud Logging's reader reads in pages (_batches)
            self.read = lambda *args, **kw: ([e for e in batch if e.vm == vm] for batch in reader.read(*args, **kw))

    def new_entries(self, job_id: str, attempt: int | None = None) -> list[OutputEntry]:
        return [entry for entry in self._reader.new_entries(job_id, attempt) if entry.vm == self.vm]

    def expect_nodes(self, nodes: int) -> None:  # the reader below reads every node's lines
        if hasattr(self._reader, "expect_nodes"):
            self._reader.expect_nodes(nodes)


def node_vm(job_id: str, rank: int, attempt: int | None) -> tuple[str, int]:
    """The VM of rank ``rank`` of a gang's current attempt, and that attempt; ``CliError`` when there is none."""
    job = JobStatusSource().job(job_id)
    if job is None or job.nodes == 1:
        raise CliError(f"--node: {job_id} is {'no job' if job is None else 'a job of one VM'}", 2)
    if attempt is not None and attempt != job.attempt:
        raise CliError(f"--node: only the nodes of {job_id}'s current attempt ({job.attempt}) are known; "
                       "without --node, every node's output is shown, each line with its VM", 2)
    node = next((n for n in job.gang or [] if n.rank == rank), None)
    if node is None:
        raise CliError(f"--node: {job_id} attempt {job.attempt} has no node {rank} yet (its nodes: "
                       f"{', '.join(f'{n.rank}: {n.vm}' for n in job.gang or []) or 'none claimed'})", 2)
    return node.vm, job.attempt


def cmd_logs(args) -> int:
    def body() -> int:
        reader, settle_s, poll_s = open_reader()
        if getattr(args, "node", None) is not None:
            vm, args.attempt = node_vm(args.job_id, args.node, args.attempt)
            reader = OneNode(reader, vm)
        if not args.follow:
            return print_once(args.job_id, reader, args.attempt, args.style, sys.stdout, sys.stderr)
        from zen.cli.kit import database_configured

        if database_configured() and (note := _array_id(args.job_id)):
            raise CliError(note, 1)  # followed, it waited a minute for a job of that id and said "no job"
        return follow(args.job_id, reader, JobStatusSource(), attempt=args.attempt, style=args.style,
                      settle_s=settle_s, poll_s=poll_s)

    return _run(body)


class Following:
    """What ``zen submit --wait`` follows with, opened and read once BEFORE it publishes: a submission
    it could not follow is not published (a script retrying a failed ``--wait`` would make a second job)."""

    def __init__(self, job_id: str):
        try:
            self.reader, self.settle_s, self.poll_s = open_reader()
            self.status = JobStatusSource()
            self.existing = self.status.job(job_id)  # a read: an unreachable database fails here
            self.reader.new_entries(job_id, 0)  # attempts start at 1: a read that finds nothing, or fails
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the database, Cloud Logging, credentials: one line
            raise CliError(f"--wait cannot follow the job, so it was not published: {_why(exc)}",
                           exc.code if isinstance(exc, CliError) else 1) from None

    def follow(self, job_id: str, message_id: str, request_hash: str, style: str = "labelled") -> int:
        """Follow the job just published (that message, that request) to its end; its exit code."""
        return _run(lambda: follow(job_id, self.reader, self.status, style=style, settle_s=self.settle_s,
                                   poll_s=self.poll_s, message_id=message_id, request_hash=request_hash))


NO_CREDENTIALS = ("no Google credentials to read Cloud Logging: run `gcloud auth application-default login`{, or start "
                  "a local stack in this directory with `zen local up`}")


def _why(exc: Exception) -> str:
    if why := credentials_problem(exc, NO_CREDENTIALS):
        return why
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, TransientError):
        return f"cannot reach the database: {text}"
    return text


def register(sub, ctx: Context) -> None:
    logs = sub.add_parser("logs", help="a job's output (stdout and stderr of every attempt)",
                          description="Print a job's output, every attempt in order; with -f, follow it until "
                                      "the job ends and exit with the job's exit code.")
    logs.add_argument("job_id", metavar="JOB", help="the job's id (as `zen submit` printed it)")
    logs.add_argument("--attempt", type=positive, metavar="N", help="only this attempt (default: all, in order)")
    logs.add_argument("--node", type=int, metavar="K", help="a multi-node job's node K (its rank) of the current "
                      "attempt only (default: every node, each line with its VM)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing until the job ends, then exit with its exit code")
    style = logs.add_mutually_exclusive_group()
    style.add_argument("--raw", dest="style", action="store_const", const="raw",
                       help="the lines alone, without the [attempt vm stream] label")
    style.add_argument("--json", dest="style", action="store_const", const="json",
                       help="one JSON entry per line (job_id, attempt, stream, vm, seq, time, text, final)")
    logs.set_defaults(func=cmd_logs, style="labelled")
