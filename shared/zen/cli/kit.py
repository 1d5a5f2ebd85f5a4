"""What every ``zen`` command shares: one-line errors instead of tracebacks, where the database is,
and plain text tables (no local-only package: the CLI runs from the deployable wheel alone).

Exit codes: 0 done, 1 a failure (the database or Pub/Sub unreachable, no such job, a refused
request), 2 a usage error (bad flags or arguments, an invalid job file), 130 Ctrl-C (a publish it interrupted is
said: ``zen.cli.publish.Interrupted``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, NoReturn, Sequence, TypeVar

NO_DATABASE = ("no database to read: {no local stack is running in this directory or above it (start one with `zen local "
               "up`), and }neither ZEN_DATABASE_URL nor ZEN_CLOUDSQL_INSTANCE is set (see docs/how-to/deploy.md, 'Using a "
               "deployed Zen')")
NO_CREDENTIALS = ("no Google credentials: run `gcloud auth application-default login` to use a deployed Zen{, or start a "
                  "local stack in this directory with `zen local up`}")


def deployed() -> bool:
    """Whether this command talks to a deployed Zen: ``ZEN_PROJECT`` set (as the deploy guide has its users do) and no
    local stack found (``zen.cli.main`` points the clients at one it finds), so advice about the local stack would
    mislead. Neither: a newcomer in a checkout, told to start one."""
    return bool(os.environ.get("ZEN_PROJECT")) and not os.environ.get("PUBSUB_EMULATOR_HOST")


def for_here(message: str) -> str:
    """``message`` with its local-stack advice (the part in braces) where it may help: not to a deployed Zen's user."""
    return re.sub(r"\{([^}]*)\}", "" if deployed() else r"\1", message)


class CliError(Exception):
    """A failure the user can act on: printed as one line, then exit ``code`` (1, or 2 for usage)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


PREFIX = "zen: "  # every error line starts so, whichever command (``fail`` prints them)


class Parser(argparse.ArgumentParser):
    """``zen``'s argument parser (its subcommands' too): a usage error is one line, ``zen: <command>:
    <what is wrong> (<command> --help)``, exit 2, instead of argparse's usage block and ``prog: error:``."""

    argv: list[str] | None = None  # what is parsed (None: sys.argv's), for the error's hint

    def parse_known_args(self, args=None, namespace=None):
        if args is not None:
            Parser.argv = list(args)  # every subcommand's parser reads the whole line's words
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("zen").strip()
        flag = message.split()[-4].rstrip(":") if message.endswith(": expected one argument") else ""
        argv = sys.argv[1:] if self.argv is None else self.argv  # the word typed may be the flag's abbreviation
        typed = [i for i, word in enumerate(argv) if word.startswith("--") and len(word) > 2 and flag.startswith(word)]
        if flag.startswith("-") and typed and argv[typed[0] + 1:typed[0] + 2] and argv[typed[0] + 1].startswith("-"):
            # argparse read the value starting with '-' (-3d, -1) as a flag, and says none was given
            message += f" (a value starting with '-' goes as {flag}=VALUE)"
        fail(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)", 2)
        raise SystemExit(2)


# What a terminal acts on rather than shows: C0 and C1 controls and DEL (ESC starts the sequences that move the
# cursor, clear the screen or set the window's title; CSI is ESC [ in one character), and the marks that reorder
# what follows them on screen (bidirectional embeddings, overrides and isolates, and the three marks: LRM, RLM, ALM).
_UNSHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(text: object, keep: str = "") -> str:
    """``text`` as a terminal shows it and does nothing else: control characters written as escapes (``\\x1b``,
    ``\\n``), but those of ``keep``. A job's words (its command, labels, a stop's reason, its output's tail, an id a
    refused message named) are its submitter's, and other people read them in their terminals."""
    return _UNSHOWN.sub(lambda m: m.group() if m.group() in keep else m.group().encode("unicode_escape").decode(),
                        str(text))


def fail(message: str, code: int = 1) -> int:
    """Print ``message``'s first line as an error line (``PREFIX``) on stderr; returns ``code``."""
    first = shown(message.strip().splitlines()[0]) if message.strip() else "failed"
    print(f"{PREFIX}{first}", file=sys.stderr, flush=True)
    return code


def deployed_config():
    """The configuration as the functions have it: ``ZEN_PROJECT`` (terraform gives it to them, and the docs to a
    deployed Zen's users) names the project, else the file's ``project``: where messages go, and the audience a
    service account's ID token is asked for (the functions accept no other, ``zen.adapters.submitters``)."""
    from zen.core.config import load_config

    config = load_config()
    return config.for_project(os.environ.get("ZEN_PROJECT") or config.project)


def database_configured() -> bool:
    return bool(os.environ.get("ZEN_CLOUDSQL_INSTANCE") or os.environ.get("ZEN_DATABASE_URL"))


def database():
    """The database a read command uses. Never starts or creates one: a running local stack (whose
    record sets ZEN_DATABASE_URL), ZEN_DATABASE_URL, or Cloud SQL (ZEN_CLOUDSQL_INSTANCE), else
    ``CliError``."""
    if not database_configured():
        raise CliError(for_here(NO_DATABASE))
    if os.environ.get("ZEN_CLOUDSQL_INSTANCE") and not os.environ.get("ZEN_DB_USER"):
        raise CliError("ZEN_CLOUDSQL_INSTANCE is set but ZEN_DB_USER is not: set it to your Google account's "
                       "e-mail (your IAM database user)")
    from zen.store.db import Database

    try:
        return Database.from_env()
    except ValueError as exc:  # a malformed ZEN_DATABASE_URL
        raise CliError(str(exc), 2) from None


_Read = TypeVar("_Read")


class _Reads:
    """The database a command's reads share (``run`` makes one per command), or the error its connection raised."""

    def __init__(self) -> None:
        self.db: Any = None
        self.failed: Exception | None = None


_reads: _Reads | None = None


def read(query: Callable[[Any], _Read]) -> _Read:
    """``query(session)`` in one transaction of the configured database (``database``); raises when it cannot be
    read (unreachable, no ZEN_DB_USER, no read grant, no credentials). In a command ``run`` runs, its reads share one
    database and its connection (on Cloud SQL each new one costs the connector's handshake: `zen submit` read three
    times), and once one could not reach it the next fail at once with its error (each waited out its timeout
    again); elsewhere each opens and closes its own."""
    from zen.core.errors import TransientError

    reads = _reads
    if reads is None:
        db = database()
        try:
            with db.transaction() as session:
                return query(session)
        finally:
            db.close()
    if reads.failed is not None:
        raise reads.failed
    if reads.db is None:
        reads.db = database()
    try:
        with reads.db.transaction() as session:
            return query(session)
    except TransientError as exc:  # unreachable, or gone: not asked again in this command
        reads.failed = exc
        raise


AGE_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def age_s(text: str) -> int | None:
    """An age as ``--since`` takes it (90s, 30m, 2h, 7d), in seconds; None when ``text`` is none."""
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    return int(match.group(1)) * AGE_UNITS_S[match.group(2)] if match else None


def since(text: str) -> datetime:
    """``--since``: an age (90s, 30m, 2h, 7d) or an ISO date/time (2026-11-20, 2026-11-20T08:00)."""
    try:
        if (age := age_s(text)) is not None:
            return datetime.now(timezone.utc) - timedelta(seconds=age)
        moment = datetime.fromisoformat(text)
        moment = moment if moment.tzinfo else moment.astimezone()
        moment.astimezone(timezone.utc), moment.astimezone()  # one UTC (the database) and this machine can place
        return moment
    except (OverflowError, ValueError):  # an age past year 1, a date that is none, one the clock cannot place
        # (0001-01-01T00:00+01:00 is in year 0 in UTC: the database's driver failed on it, a DataRejected line)
        raise argparse.ArgumentTypeError(f"{text!r} is neither an age (30m, 2h, 7d) nor a date (2026-11-20)") from None


MOST = 2 ** 31 - 1  # a count or attempt Postgres holds (larger was the database's out-of-range error)
MOST_ID = 2 ** 63 - 1  # a row id (bigserial)


def positive(text: str, most: int = MOST) -> int:
    """``--limit``, ``--attempt N`` and the like: a whole number from 1 to ``most``."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {most}")
    return value


def seconds(text: str) -> int:
    """``--max-runtime SECONDS`` and the like: a whole number, as ``type=int`` reads it (its range is the job's field's
    to check); an age as ``--since`` takes it (10m) is told the seconds to give, not argparse's "invalid int value"."""
    try:
        return int(text)
    except ValueError:
        given = "" if (age := age_s(text)) is None else f" ({text.strip()} is {age})"
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds{given}") from None


def row_id(text: str) -> int:
    """``--before ID``: a row id, as the pages' hints print them."""
    return positive(text, MOST_ID)


def positive_number(text: str) -> float:
    """``--window MINUTES`` and the like: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 1e8:  # also refuses nan, and inf (minutes past year 1, seconds no clock waits)
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0 (at most 100000000)")
    return value


@dataclass(frozen=True)
class Context:
    """What the commands share, handed to each command module's ``register(sub, ctx)``: where the
    database is, and the argument types several commands parse."""

    database: Callable[[], Any] = database  # the database a command reads; never starts or creates one
    since: Callable[[str], datetime] = since  # --since AGE|DATE
    positive: Callable[[str], int] = positive  # --limit N
    positive_number: Callable[[str], float] = positive_number  # --window MINUTES


def dev_help(text: str) -> dict[str, str]:
    """A development-only command's help line, as ``add_parser`` keywords: given in a checkout, none in
    the deployable wheel, so ``zen --help`` does not list the command there (run, it still answers with
    ``local_only``'s error)."""
    import importlib.util

    return {"help": text} if importlib.util.find_spec("zen_dev") is not None else {}


def local_only(what: str) -> CliError:
    """The error of a development-only command (``zen local``, ``simulate``, ``demo``) run from the wheel."""
    return CliError(f"`zen {what}` needs the development checkout (its local stand-ins are not in the deployable "
                    "wheel): run it from the repository after `make venv`")


def run(action: Callable[[], int]) -> int:
    """Run a command: known failures become one line on stderr and an exit code, never a traceback. Its reads
    (``read``) share one database, closed as it ends."""
    global _reads
    _reads = _Reads()
    try:
        return _run(action)
    finally:
        reads, _reads = _reads, None
        if reads.db is not None:
            reads.db.close()


def _run(action: Callable[[], int]) -> int:
    from zen.core.errors import ConfigError, TransientError

    try:
        code = action()
        sys.stdout.flush()  # a closed pipe (`| head`) shows here, not in the interpreter's exit
        return code
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except ConfigError as exc:
        return _fail(f"configuration: {exc}", 1)
    except TransientError as exc:
        return _fail(f"cannot reach the database: {exc} ({'' if deployed() else 'is the stack up? `zen local up`, or '}"
                     "check ZEN_DATABASE_URL / ZEN_CLOUDSQL_INSTANCE)", 1)
    except BrokenPipeError:
        # The reader went away (`zen jobs list | head`): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
        if why := credentials_problem(exc, NO_CREDENTIALS):
            return _fail(why, 1)
        if (missing := _schema_missing(exc)) and not os.environ.get("ZEN_DEBUG"):
            return _fail(f"the database has no {missing} yet: its schema is older than this zen, or not made: run "
                         "`zen db migrate` (docs/how-to/deploy.md)", 1)
        if os.environ.get("ZEN_DEBUG"):
            raise
        return _fail(f"{type(exc).__name__}: {exc} (set ZEN_DEBUG=1 to see where)", 1)


def credentials_problem(exc: BaseException, missing: str) -> str | None:
    """What to do about Google credentials ``exc`` says are wrong (``missing``: none found), else None: refused
    (a revoked key, an expired login: RefreshError) or not checkable (no way to Google's token endpoint)."""
    try:
        from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError
    except ImportError:
        return None
    from zen.core.text import first_line

    first = first_line(exc, 200)
    if isinstance(exc, DefaultCredentialsError):
        return for_here(missing)
    if isinstance(exc, RefreshError):
        return (f"Google refused your credentials ({first}): run `gcloud auth application-default login` again, or "
                "renew the key GOOGLE_APPLICATION_CREDENTIALS names")
    if isinstance(exc, TransportError):
        return f"could not reach Google to check your credentials ({first}): check the network"
    return None


def _schema_missing(exc: Exception) -> str | None:
    """What the server said a read lacked, where the schema lacks a table or column (a command run before
    ``zen db migrate``), else None."""
    from zen.store.db import server_message, sqlstate

    if sqlstate(exc) not in ("42P01", "42703"):  # undefined_table, undefined_column
        return None
    said = server_message(exc)  # 'column "c" of relation "t" does not exist' names the column first
    found = re.search(r'column "([^"]+)"', said) or re.search(r'relation "([^"]+)" does not exist', said)
    return f"{'column' if 'column' in found[0] else 'table'} {found[1]}" if found else "table or column it reads"


_fail = fail


def print_table(rows: list[dict[str, Any]], columns: Sequence[str], out=None) -> None:
    out = out or sys.stdout
    text = [[("" if row.get(c) is None else shown(row.get(c))) for c in columns] for row in rows]  # one line a row
    widths = [max([len(c)] + [len(r[i]) for r in text]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip(), file=out)
    for row in text:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=out)


def span(seconds: float | None) -> str:
    """A duration a person reads at a glance: 42s, 3m05s, 2h10m, 3d04h."""
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


# The columns of `zen jobs list` (and of the demo's closing table): the keys of job_row.
def no_job(session, job_id: str, otherwise: str, what: str = "job") -> str:
    """What to say of a job id that has no row: Zen's latest refusal of a message naming it when one is kept (a
    refused submission never makes a row, and "no job" alone sent its sender looking elsewhere), else ``otherwise``."""
    from zen.store import repository
    from zen.store.jobstore import PostgresJobTx

    if what == "job" and (tasks := PostgresJobTx(session).array_tasks(job_id)):  # "no job" sent its owner looking
        return (f"{job_id} is an array of {len(tasks)} tasks, not a job: `zen jobs list --array {job_id}` lists them "
                f"({job_id}-0 ..., each a job), `zen explain {job_id}` says how it goes")
    row = repository.latest_rejection(session, job_id)
    if row is None:
        return f"no {what} {job_id} ({otherwise})"
    at = row["at"].astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    reason = " ".join((row["reason"] or "").split())  # one line (an error line prints its first), its start
    reason = reason if len(reason) <= 300 else reason[:299] + "…"
    sender = f" from {row['principal']}" if row.get("principal") else ""  # (an id no job holds: anyone may name it)
    return f"no job {job_id}: Zen refused a message for it{sender} at {at}: {reason} (`zen rejected --job {job_id}`)"


JOB_COLUMNS = ("job_id", "user", "queue", "cluster", "region", "status", "attempt", "submitted", "wait", "duration",
               "exit")


def job_row(job, now: datetime | None = None, zone: Any = None) -> dict[str, Any]:
    """A job as a table row: who, where, status, how long it waited and ran; submitted in ``zone`` (the
    machine's own when None: the CLI's; the console's pages say UTC)."""
    now = now or datetime.now(timezone.utc)
    started, finished = job.started_at, job.finished_at
    waited_until = started or finished or now
    return {
        "job_id": job.job_id, "user": job.user_id, "queue": job.queue or "", "cluster": job.cluster,
        "region": job.region or "",
        "status": job.status.value, "attempt": job.attempt,
        "submitted": job.submitted_at.astimezone(zone).strftime("%m-%d %H:%M:%S"),
        "wait": span((waited_until - job.submitted_at).total_seconds()),
        "duration": span(((finished or now) - started).total_seconds()) if started else "",
        "exit": job.exit_code,
    }
