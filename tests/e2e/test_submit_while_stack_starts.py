"""The README's five minutes begin ``zen local up &`` and go straight on to ``zen submit examples/hello.yaml``:
the prompt is back at once, and nothing says to wait for the "Zen is running locally" lines. A ``zen submit``
made while the stack was still starting, once its record (.zen/stack.json) named the Compute stand-in (which signs
the sender's token) but before ``up`` created the functions' trigger subscriptions (``eventarc-<topic>``, made
only after the function group had started, up to 60 s later), printed ``submitted <id> ... (message 1)`` and
exited 0; the Pub/Sub stand-in, like Pub/Sub, drops a message published to a topic without subscriptions, and the
job never existed. The subscriptions are made with the topics now (zen_dev/local/stack.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_stack_restart import CONFIG as RESTART_CONFIG, SCENARIO as RESTART_SCENARIO
from tests.stack_support import ended, free_base_port, home, log_tails  # noqa: F401 - home: the fixture
from zen_dev.local import stack as stack_module
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports

pytestmark = pytest.mark.e2e

ROOT = Path(stack_module.__file__).resolve().parents[3]

# The restart test's stack, a project of its own.
CONFIG, SCENARIO = (text.replace("zen-restart", "zen-early") for text in (RESTART_CONFIG, RESTART_SCENARIO))

STACK_ONLY = ("ZEN_DATABASE_URL", "ZEN_CLOUDSQL_INSTANCE", "PUBSUB_EMULATOR_HOST", "ZEN_CONFIG", "ZEN_PROJECT",
              "ZEN_IDENTITY_ENDPOINT", "ZEN_JOB_LOGS_DIR")


def test_a_job_submitted_while_the_stack_starts_is_not_lost(home, monkeypatch):
    (home / "zen.yaml").write_text(CONFIG)
    (home / "scenario.yaml").write_text(SCENARIO)
    said: dict[str, subprocess.CompletedProcess] = {}

    def user_submits() -> None:
        """`zen submit` in the stack's folder, as a user does in another terminal: it finds .zen/stack.json."""
        env = {k: v for k, v in os.environ.items() if k not in STACK_ONLY}
        env["PYTHONPATH"] = f"{ROOT / 'shared'}:{ROOT}"
        said["submit"] = subprocess.run(
            [sys.executable, "-m", "zen.cli.main", "submit", "--cluster", "1xl4", "--job-id", "early", "--",
             "echo", "early"], cwd=home, env=env, capture_output=True, text=True, timeout=60)

    class Group(stack_module.FunctionGroup):
        def start(self, *args, **kwargs):
            if "submit" not in said:  # the moment: the stack recorded, its Compute listening, no function yet
                user_submits()
            return super().start(*args, **kwargs)

    monkeypatch.setattr(stack_module, "FunctionGroup", Group)
    stack = LocalStack(home=home / ".zen", config_path=home / "zen.yaml", scenario=home / "scenario.yaml",
                       tick_every_s=2.0, ports=Ports.from_base(free_base_port(start=28800)), fresh=True)
    record = stack.up()
    try:
        submit = said["submit"]
        assert submit.returncode == 0 and "submitted early" in submit.stdout, (submit.stdout, submit.stderr)
        with overridden_environ(record["env"]):
            [job] = ended(["early"], 60)
        assert job is not None, ("`zen submit` said it submitted the job, which never reached Zen: "
                                 + submit.stdout.strip() + "\n" + log_tails(home / ".zen" / "logs", 5))
        assert job.status.value == "SUCCEEDED", job
    finally:
        stack.down()
