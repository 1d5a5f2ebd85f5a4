"""What docs/reference/configuration.md promises of a configuration, loaded."""

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from zen.core.config import DEFAULT_CONFIG_PATH, ZenConfig, load_config
from zen.core.errors import ConfigError

CLUSTER = ("clusters: [{name: 1xl4, gpu_type: nvidia-l4, gpu_count: 1, machine_type: g2-standard-8, regions: [us-central1],"
           " max_vms_per_region: 2, max_vms: 2}]\n")


def test_an_email_key_in_another_project_is_refused_at_load(tmp_path):
    # The notifier reads only secrets named with the prefix in Zen's own project (terraform's grant is conditioned
    # on this project's number): a Slack or webhook target in another project is refused, and so is the email
    # API's key (it loaded, and every email notice then failed on its read).
    path = tmp_path / "zen.yaml"
    path.write_text("project: zen-prod\n" + CLUSTER + (
        "notifications:\n  email: {api_key_secret: projects/other-project/secrets/zen-notify-sendgrid/versions/latest,"
        " sender: zen@example.com, recipients: ['*@example.com']}\n"))
    with pytest.raises(ConfigError, match="api_key_secret"):
        load_config(path).for_project("zen-prod")


def _fields(model: type[BaseModel], path: str = ""):
    for name, field in model.model_fields.items():
        yield f"{path}{name}", name
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield from _fields(annotation, f"{path}{name}.")
            stack.extend(typing.get_args(annotation))


def test_the_default_configuration_documents_every_field():
    # "the shipped shared/zen/core/default_config.yaml is used (it documents every field)"; its first line says so.
    text = DEFAULT_CONFIG_PATH.read_text()
    missing = sorted({dotted for dotted, name in _fields(ZenConfig)
                      if not re.search(rf"(^|[\s{{,]){re.escape(name)}:", text, re.M)})
    assert not missing, f"fields default_config.yaml does not show: {missing}"


def test_a_service_accounts_email_without_its_at_is_refused(tmp_path):
    path = tmp_path / "zen.yaml"
    path.write_text("project: zen-prod\n" + CLUSTER + "auth: {admins: [ci.zen-prod.iam.gserviceaccount.com]}\n")
    with pytest.raises(ConfigError, match="without its '@'"):
        load_config(path)


def test_a_queue_quota_of_a_whole_float_is_that_integer(tmp_path):
    path = tmp_path / "zen.yaml"
    path.write_text("project: zen-prod\n" + CLUSTER + "queues: [{name: prod, quota: {1xl4: 16.0}}]\n")
    assert load_config(path).queues[0].quota == {"1xl4": 16}


def test_an_email_key_in_the_deployed_project_loads(tmp_path, monkeypatch):
    """A deployed Zen's project is ZEN_PROJECT (terraform sets it); a configuration left with the shipped
    ``project: zen-local`` whose key is in the deployment's project loads, and one in another project is refused."""
    from zen.cli.kit import deployed_config

    path = tmp_path / "zen.yaml"
    path.write_text("project: zen-local\n" + CLUSTER + (
        "notifications:\n  email: {api_key_secret: projects/my-project/secrets/zen-notify-sendgrid/versions/latest,"
        " sender: zen@example.com, recipients: ['*@example.com']}\n"))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.setenv("ZEN_PROJECT", "my-project")
    assert deployed_config().project == "my-project"
    monkeypatch.setenv("ZEN_PROJECT", "their-project")
    with pytest.raises(ConfigError, match="not my-project's"):
        deployed_config()


def test_the_reference_gives_each_limit_and_its_ceiling():
    """docs/reference/configuration.md#limits: each field of ``limits:`` and ``attempts:`` is named, and each one
    with a ceiling (``zen.core.limits.CEILINGS``) has its row in the table, with the ceiling refused above."""
    from zen.core.limits import CEILINGS, Attempts, Limits

    text = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "configuration.md").read_text()
    section = text[text.index("\n## Limits\n"):text.index("\n## ", text.index("\n## Limits\n") + 1)]
    unnamed = [f"{name}.{field}" for name, model in (("limits", Limits), ("attempts", Attempts))
               for field in model.model_fields if f"`{name}.{field}`" not in section]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in section.splitlines()
            if line.startswith("| `")}
    assert unnamed == [] and {field: rows.get(f"`{field}`") for field in CEILINGS} == {
        field: str(most) for field, (most, _) in CEILINGS.items()}
