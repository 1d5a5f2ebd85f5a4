"""The agent's reports (``zen.agent.reports``): whatever text a job leaves for its final report, and
whatever tags the VM was given, a report is sent (a final report lost costs a rerun of the job)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from zen.agent.identity import Identity
from zen.agent.reports import AttemptReport, Reporter, fit_message
from zen.core.models import AgentStatus, Heartbeat

IDENTITY = Identity(project="p", vm="vm-r", cluster="4xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True, tags=("hipaa",))


def reporter(identity: Identity = IDENTITY) -> tuple[Reporter, list[Heartbeat]]:
    sent: list[Heartbeat] = []
    return Reporter(identity, lambda message, budget_s: sent.append(message)), sent


def test_a_message_quoting_a_name_that_is_not_utf8_is_escaped_and_sent():
    """A job's output file named ``caf\\xe9.txt`` came back from os.walk as ``caf\\udce9.txt``; its note
    in the final report failed validation, and no final report was sent at all."""
    assert fit_message("upload of caf\udce9.txt failed\x00") == "upload of caf\\udce9.txt failed\ufffd"
    assert fit_message("\udce9" * 9000) == ("\\udce9" * 9000)[-8192:]
    report, sent = reporter()

    assert report.job(AttemptReport("j1", 1), AgentStatus.FAILED, budget_s=1, exit_code=0,
                      message="zen: upload of caf\udce9.txt failed")

    [final] = sent
    assert final.message == "zen: upload of caf\\udce9.txt failed" and final.tags == ["hipaa"]
    assert Heartbeat.model_validate_json(final.to_bytes()) == final


def test_a_report_zen_would_refuse_for_its_tags_or_data_is_sent_without_them():
    report, sent = reporter(replace(IDENTITY, tags=("x" * 42,)))  # as a template could set them

    assert report.job(AttemptReport("j1", 1), AgentStatus.SUCCEEDED, budget_s=1, exit_code=0, message="done",
                      data={"staged_bytes": -1})

    [final] = sent
    assert (final.status, final.exit_code, final.message, final.tags, final.staged_bytes) == (
        AgentStatus.SUCCEEDED, 0, None, None, None)
    unnamed, none_sent = reporter(replace(IDENTITY, vm="v" * 200))  # only a report no heartbeat can name raises
    with pytest.raises(ValidationError):
        unnamed.job(AttemptReport("j1", 1), AgentStatus.CLAIMED, budget_s=1)
    assert none_sent == []
