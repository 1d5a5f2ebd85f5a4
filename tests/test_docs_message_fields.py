"""Every field a JobRequest takes is described in its section of docs/reference/messages.md (named in backticks
outside the example): `priority` and `labels` stood in the example alone, with no word of their range or use."""

from __future__ import annotations

from pathlib import Path

from zen.core.models import JobRequest

ROOT = Path(__file__).resolve().parent.parent
DESCRIBED_ELSEWHERE = {"version"}  # the page's Rules: every message's version


def test_every_job_request_field_is_described():
    page = (ROOT / "docs" / "reference" / "messages.md").read_text()
    section = page.split("\n## JobRequest\n", 1)[1].split("\n## ", 1)[0]
    prose = section.split("```", 2)[2]  # after the example
    missing = [name for name in JobRequest.model_fields if name not in DESCRIBED_ELSEWHERE and f"`{name}`" not in prose]
    assert not missing, f"JobRequest fields not described in messages.md: {missing}"
