"""A job's ``notify`` (and a queue's) through the functions, against a real Postgres: a target that is not
a secret reference, an unknown event, too many targets, a secret the queue does not allow or the notifier
may not read, an email nobody configured: rejected with the reason naming the field, recorded and acked;
an allowed one is stored as references alone."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_queues import CLUSTER, with_queues
from tests.test_secret_fields import assert_rejected, submitted_functions
from zen.core.config import ZenConfig
from zen.core.errors import ConfigError
from zen.store import repository

SLACK = "projects/my-project/secrets/zen-notify-team/versions/latest"
HOOK = "projects/my-project/secrets/zen-notify-hook/versions/2"
ALLOW = ["projects/my-project/secrets/zen-notify-*/versions/*"]
QUEUES = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"], "secrets": ALLOW},
          {"name": "batch", "quota": {CLUSTER: 8}, "users": ["bob"]}]


def in_project(config, reference: str) -> str:
    """``reference`` (or each of a list's) in this Zen's project, whose secrets alone the notifier may read."""
    return reference.replace("projects/my-project/", f"projects/{config.project}/")

BAD_NOTIFY = [
    ([{"slack": "https://hooks.slack.com/services/T/B/x"}],
     "notify.0: slack: its value (not quoted: it may be the secret itself) is not a Secret Manager secret version"),
    ([{"webhook": "zen-notify-hook"}],
     "notify.0: webhook: its value (not quoted: it may be the secret itself) is not a Secret Manager secret version"),
    ([{"slack": SLACK, "on": ["FAILED", "STARTED"]}],
     "notify.0.on.1: 'STARTED' is not an event Zen notifies of: give SUCCEEDED, FAILED, CANCELLED, PREEMPTED"),
    ([{"slack": SLACK, "webhook": HOOK}], "notify.0: give exactly one of slack, webhook"),
    ([{"on": ["FAILED"]}], "notify.0: give exactly one of slack, webhook"),
    ([{"slack": SLACK, "channel": "#ml"}], "notify.0.channel: Extra inputs are not permitted"),
    ([{"slack": SLACK}] * 5, "notify: at most 4 targets (5 given)"),
    ([{"email": "not an address"}], "notify.0.email: 'not an address' is not an email address"),
    ([{"slack": SLACK, "on": []}], "notify.0.on: List should have at least 1 item"),
]


@pytest.mark.parametrize("notify, reason", BAD_NOTIFY, ids=[r for _, r in BAD_NOTIFY])
def test_a_bad_target_is_rejected_naming_the_field(functions, zen, publisher, notify, reason):
    assert_rejected(functions, zen, publisher, job_request("j", notify=notify), reason)


def test_a_queue_refuses_a_secret_it_does_not_allow(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = submitted_functions(with_queues(config, QUEUES), db, publisher, clock, db_url, monkeypatch)
    slack = in_project(config, SLACK)
    assert_rejected(functions, zen, publisher, job_request("j", user_id="bob", notify=[{"slack": slack}]),
                    f"secret notify.0.slack: queue batch allows no reference {slack}")


def test_a_secret_of_another_project_is_refused_naming_this_one(config, db, publisher, clock, db_url, monkeypatch):
    """The notifier may read its own project's secrets alone (terraform's grant): one of another project was
    accepted at submission, and its every notice refused at delivery (PermissionDenied), for good."""
    queues = [{**QUEUES[0], "secrets": ["projects/*/secrets/zen-notify-*/versions/*"]}]
    zen, functions = submitted_functions(with_queues(config, queues), db, publisher, clock, db_url, monkeypatch)
    assert_rejected(functions, zen, publisher, job_request("j", notify=[{"slack": SLACK}]),
                    f"notify.0.slack: the notifier reads only secrets of this Zen's project {config.project}, "
                    "not my-project's")
    functions.submit(job_request("ok", notify=[{"slack": in_project(config, SLACK)}]))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "ok").status.value == "QUEUED"


def test_an_email_key_the_notifier_may_not_read_is_refused_at_load(config):
    email = {"api_key_secret": "projects/my-project/secrets/sendgrid-key/versions/1", "sender": "zen@example.com",
             "recipients": ["*@example.com"]}
    with pytest.raises((ConfigError, ValueError), match="email.api_key_secret: the notifier reads only secrets "
                                                        r"named zen-notify-\*, not sendgrid-key"):
        ZenConfig.model_validate({**config.model_dump(), "notifications": {"email": email}})


def test_a_secret_the_notifier_may_not_read_is_refused(config, db, publisher, clock, db_url, monkeypatch):
    queues = [{**QUEUES[0], "secrets": ["projects/my-project/secrets/*/versions/*"]}]
    zen, functions = submitted_functions(with_queues(config, queues), db, publisher, clock, db_url, monkeypatch)
    other = "projects/my-project/secrets/hf-token/versions/1"
    assert_rejected(functions, zen, publisher, job_request("j", notify=[{"webhook": other}]),
                    "notify.0.webhook: the notifier reads only secrets named zen-notify-*, not hf-token")


def test_email_without_an_email_configuration_is_refused(functions, zen, publisher):
    assert_rejected(functions, zen, publisher, job_request("j", notify=[{"email": "alice@example.com"}]),
                    "notify.0.email: this Zen sends no email (its configuration has no notifications.email)")


def test_email_to_an_address_not_allowed_is_refused(config, db, publisher, clock, db_url, monkeypatch):
    mailing = ZenConfig.model_validate({**config.model_dump(), "notifications": {"email": {
        "api_key_secret": f"projects/{config.project}/secrets/zen-notify-sendgrid/versions/1",
        "sender": "zen@example.com", "recipients": ["*@example.com"]}}})
    zen, functions = submitted_functions(mailing, db, publisher, clock, db_url, monkeypatch)
    assert_rejected(functions, zen, publisher, job_request("j", notify=[{"email": "eve@elsewhere.org"}]),
                    "notify.0.email: eve@elsewhere.org is not among the addresses jobs may mail")
    functions.submit(job_request("ok", notify=[{"email": "Alice@Example.com", "on": ["FAILED"]}]))


def test_an_allowed_target_is_stored_as_its_reference(config, db, publisher, clock, db_url, monkeypatch):
    queues = [{**QUEUES[0], "secrets": [in_project(config, ALLOW[0])]}, QUEUES[1]]
    zen, functions = submitted_functions(with_queues(config, queues), db, publisher, clock, db_url, monkeypatch)
    slack, hook = in_project(config, SLACK), in_project(config, HOOK)

    functions.submit(job_request("j", notify=[{"slack": slack, "on": ["FAILED", "PREEMPTED"]}, {"webhook": hook}]))

    with zen.db.transaction() as session:
        job = repository.get_job(session, "j")
    assert job.status.value == "QUEUED"
    assert job.request["notify"] == [
        {"slack": slack, "on": ["FAILED", "PREEMPTED"]},
        {"webhook": hook, "on": ["SUCCEEDED", "FAILED", "CANCELLED", "PREEMPTED"]}]


def test_a_queue_notify_is_checked_with_the_configuration(config):
    with pytest.raises((ConfigError, ValueError), match="queue research: notify.0.slack: the notifier reads only "
                                                        "secrets named zen-notify-"):
        with_queues(config, [{**QUEUES[0], "notify": [{"slack": "projects/my-project/secrets/team/versions/1"}]}])
    queued = with_queues(config, [{**QUEUES[0], "notify": [{"slack": in_project(config, SLACK), "on": ["FAILED"]}]}])
    assert queued.queue("research").notify[0].on == ["FAILED"]


def test_a_queue_notify_of_another_projects_secret_is_refused_at_load(config):
    """As a job's at submission: the notifier reads this project's secrets only (the queue loaded, and every
    notice to it was then refused at delivery, "permission denied"). The project is the one Zen runs in
    (``ZenConfig.for_project``: ZEN_PROJECT, the file's a fallback)."""
    other = "projects/someone-else/secrets/zen-notify-team/versions/latest"
    with pytest.raises((ConfigError, ValueError), match="queue research: notify.0.slack: the notifier reads only "
                                                        "secrets of this Zen's project"):
        with_queues(config, [{**QUEUES[0], "notify": [{"slack": other}]}]).for_project(config.project)


def test_too_many_queue_targets_are_refused_naming_no_job(config):
    slack = in_project(config, SLACK)
    with pytest.raises((ConfigError, ValueError), match=r"at most 4 targets \(5 given\)"):
        with_queues(config, [{**QUEUES[0], "notify": [{"slack": slack}] * 5}])


def test_zen_submit_refuses_with_the_functions_rule(config):
    from zen.core.errors import Rejected
    from zen.core.models import JobRequest
    from zen.jobs.placement import resolve_request

    queued = with_queues(config, [{**QUEUES[0], "secrets": [in_project(config, ALLOW[0])]}, QUEUES[1]])
    slack = in_project(config, SLACK)
    assert resolve_request(queued, JobRequest.model_validate(job_request("x", notify=[{"slack": slack}]))).queue
    with pytest.raises(Rejected, match="secret notify.0.slack: queue batch allows no reference"):
        resolve_request(queued, JobRequest.model_validate(job_request("x", user_id="bob", notify=[{"slack": slack}])))
