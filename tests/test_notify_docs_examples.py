"""docs/how-to/notifications.md's examples as written: `notify:` targets with an `on:` key, in a job file and in a
queue of the configuration. YAML 1.1 reads a bare `on` key as the boolean True, and both were refused with
"notify.0.1: Keys should be strings" (zen.core.documents.load_yaml reads YAML 1.2's booleans)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "how-to" / "notifications.md"


def _yaml_blocks(text: str) -> list[str]:
    return [textwrap.dedent(block) for block in re.findall(r"^ *```yaml\n(.*?)^ *```", text, re.S | re.M)]


def _job_file_example() -> str:
    return next(block for block in _yaml_blocks(DOC.read_text()) if "# train.yaml" in block)


def _queue_notify_example() -> str:
    return next(block for block in _yaml_blocks(DOC.read_text())
                if block.startswith("queues:") and "notify:" in block)


def test_the_documented_job_file_with_notify_on_is_read_as_written(tmp_path):
    from zen.cli.jobfiles import read_job_file
    from zen.core.models import JobRequest

    path = tmp_path / "train.yaml"
    path.write_text(_job_file_example())
    data = read_job_file(str(path))  # what `zen submit train.yaml` reads
    # was refused: "notify.0.1: Keys should be strings"
    request = JobRequest.model_validate({"job_id": "train-42", "user_id": "alice", **data})
    assert request.notify[0].on == ["FAILED", "PREEMPTED"]
    assert "user_id" not in data  # zen submit refuses one that is not the sender's: it is taken from the sender


def test_zen_submit_of_the_documented_job_file_does_not_say_keys_should_be_strings(tmp_path, monkeypatch, capsys):
    from zen.cli.main import main

    (tmp_path / "train.yaml").write_text(_job_file_example())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZEN_PROJECT", "my-project")
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    main(["submit", "train.yaml"])  # refused for other reasons here (no stack, no image) is fine
    assert "Keys should be strings" not in capsys.readouterr().err


def test_the_documented_queue_notify_loads(tmp_path):
    import yaml

    from zen.core.config import DEFAULT_CONFIG_PATH, load_config

    # the example is a deployment in project my-project: the notifier reads only its own project's secrets
    config = Path(DEFAULT_CONFIG_PATH).read_text().replace("project: zen-local ", "project: my-project ", 1)
    assert "project: my-project" in config
    queue = yaml.safe_load(_queue_notify_example().replace("on:", "'on':"))["queues"][0]
    text = config + "\n" + _queue_notify_example().replace(
        "  - name: research\n", "  - name: research\n    quota: {4xa100-40gb: 16}\n")
    (tmp_path / "zen.yaml").write_text(text)
    loaded = load_config(tmp_path / "zen.yaml")  # ConfigError: queues.0.notify.0.1: Keys should be strings
    assert [t.on for t in loaded.queues[0].notify] == [queue["notify"][0]["on"]]


def test_yaml_reads_only_true_and_false_as_booleans_and_a_boolean_field_still_takes_yes():
    from zen.core.prices import Pricing
    from zen.core.documents import load_yaml

    assert load_yaml("on: [FAILED]\noff: x\na: yes\nb: true\nc: False\n") == {
        "on": ["FAILED"], "off": "x", "a": "yes", "b": True, "c": False}
    assert Pricing.model_validate(load_yaml("catalog: yes")).catalog is True
