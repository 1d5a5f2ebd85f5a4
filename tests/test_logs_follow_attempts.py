"""`zen logs -f` (zen.cli.follow.follow) of a job on its second attempt, read from Cloud Logging through the
official client against the stand-in: an attempt is read ``READ_PAGES`` pages a poll, so an earlier attempt longer
than that printed its first pages, then the next attempt's lines, and its tail came after them, or never: the next
attempt's final entry, read in the same poll, ended the follow of a job that had ended. An attempt before the
job's current one is read to the listing's end before the next."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from tests.logging_standin import LoggingStandIn
from zen.adapters import cloud_logging as joblogs_cloud
from zen.adapters.joblogs import OutputEntry
from zen.cli.follow import follow
from zen.core.models import JobStatus

PAGE = 2  # entries a page: an attempt of more than READ_PAGES * PAGE lines is read in more than one poll


def attempt_lines(attempt: int, lines: int, start: datetime) -> list[OutputEntry]:
    """An attempt's entries as its agent ships them: ``lines`` stdout lines, then the final ``zen`` line."""
    return [OutputEntry("j", attempt, "stdout", f"vm-{attempt}", seq, (start + timedelta(milliseconds=seq)).isoformat(),
                        f"{attempt}/{seq}") for seq in range(1, lines + 1)] + [
        OutputEntry("j", attempt, "zen", f"vm-{attempt}", lines + 1, (start + timedelta(seconds=1)).isoformat(),
                    f"[zen] end of attempt {attempt}", final=True)]


class Status:
    """The job, as Postgres has it: on its second attempt, ended or not."""

    def __init__(self, status: JobStatus):
        self.status = status

    def job(self, job_id):
        return SimpleNamespace(status=self.status, attempt=2, nodes=1, vm="vm-2", started_at=1, exit_code=0,
                               request_hash=None)

    def rejection(self, job_id, message_id=None):
        return None


def followed(monkeypatch, running_polls: int) -> list[str]:
    """What `zen logs -f --raw` prints of the job, ended after ``running_polls`` polls that saw it RUNNING."""
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    first = datetime.now(timezone.utc) - timedelta(hours=2)
    want_1 = attempt_lines(1, joblogs_cloud.READ_PAGES * PAGE + 3, first)  # preempted: its agent wrote its end
    want_2 = attempt_lines(2, 2, first + timedelta(hours=1))
    with LoggingStandIn() as cloud:
        client = joblogs_cloud.logging_client("p", cloud.endpoint)
        sink = joblogs_cloud.CloudSink(client, "p", {"cluster": "c", "zone": "z"})
        sink.write(want_1)
        sink.write(want_2)
        polls = [0]

        class Ending(Status):
            def job(self, job_id):
                polls[0] += 1  # `zen logs -f` ends at attempt 2's final entry once the job ended
                self.status = JobStatus.RUNNING if polls[0] <= running_polls else JobStatus.SUCCEEDED
                return super().job(job_id)

        ticks = iter(range(1, 1000))
        out = io.StringIO()
        code = follow("j", joblogs_cloud.CloudReader(client, "p", page_size=PAGE), Ending(JobStatus.RUNNING), style="raw",
                      out=out, err=io.StringIO(), poll_s=0.0, settle_s=30.0, clock=lambda: float(next(ticks)))
    assert code == 0
    return out.getvalue().splitlines()


WANT = [f"1/{n}" for n in range(1, joblogs_cloud.READ_PAGES * PAGE + 4)] + [
    "[zen] end of attempt 1", "2/1", "2/2", "[zen] end of attempt 2"]


def test_an_ended_jobs_earlier_attempt_longer_than_a_read_is_printed_to_its_end(monkeypatch):
    """Followed after the job ended: attempt 1's last lines were never printed (exit 0)."""
    assert followed(monkeypatch, running_polls=0) == WANT


def test_an_earlier_attempt_longer_than_a_read_is_printed_whole_before_the_next_one(monkeypatch):
    """Followed while attempt 2 runs: attempt 1's last lines were printed after attempt 2's."""
    assert followed(monkeypatch, running_polls=1) == WANT
