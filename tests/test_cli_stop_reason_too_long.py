"""`zen stop --reason` longer than a StopRequest takes (1024 characters) is a usage error (exit 2) naming the flag and
the limit, nothing published. It ended in the catch-all "zen: ValidationError: 1 validation error for StopRequest"
(exit 1)."""

from __future__ import annotations

from zen.cli.main import main


def test_a_stop_reason_too_long_is_a_usage_error_naming_the_limit(config, publisher, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["stop", "--force", "some-job", "--reason", "x" * 1025]) == 2
    said = capsys.readouterr().err
    assert "ValidationError" not in said and "--reason" in said and "1024" in said, said
    assert publisher.on("zen-job-stop") == []
