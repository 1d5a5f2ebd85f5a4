"""The console function serves as many requests at once as Cloud Run sends it (``max_instance_request_concurrency``,
``console.concurrency``: 16 by default). functions-framework serves an HTTP function with gunicorn, whose request
threads are ``THREADS`` or else 4 per vCPU: the console, deployed with ``cpu = "1"`` and no ``THREADS``, served 4.
A job's page holds one thread with its output stream for up to 5 minutes (``STREAM_MAX_S``), so 4 open job pages
left every other page, fragment and stream the instance was sent waiting behind them, the instance held all along."""

from __future__ import annotations

import re

import pytest
from functions_framework._http.gunicorn import GunicornApplication

from tests.terraform.hcl import Module, block


def _threads(monkeypatch, env: dict[str, str]) -> int:
    """The request threads functions-framework's gunicorn gives the console's app in this environment."""
    monkeypatch.delenv("THREADS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # read as the server is built, not at import
    return GunicornApplication(None, "127.0.0.1", 0, False).cfg.threads  # configured, not started


@pytest.mark.parametrize("function, concurrency", [("console", "var.console.concurrency"),
                                                   ("notifier", "var.notifier.concurrency"),
                                                   ("zen", "var.functions[each.key].concurrency")])
def test_each_function_has_a_request_thread_for_each_request_cloud_run_sends_it(monkeypatch, function, concurrency):
    """The notifier (8 at once by default) and the functions (their ``concurrency``, raised by an operator) alike."""
    service = block(Module.load().resources_of("google_cloudfunctions2_function")[function]["service_config"])
    assert service["max_instance_request_concurrency"] == "${" + concurrency + "}"
    env = re.findall(r"\b([A-Z][A-Z0-9_]*) += (tostring\(" + re.escape(concurrency) + r"\))",
                     service["environment_variables"])
    assert ("THREADS", f"tostring({concurrency})") in env, service["environment_variables"]
    # THREADS is the name functions-framework reads: 16 threads for a concurrency of 16, whatever the vCPUs.
    assert _threads(monkeypatch, {"THREADS": "16"}) == 16
