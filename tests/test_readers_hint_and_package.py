"""`zen submit` refusing bound data points at its rule; the '-' hint for an abbreviated flag; `make package` refuses a
notifier secret of another project than the one Zen runs in, as the functions would."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from tests.conftest import ROOT
from tests.messages import job_request
from tests.test_data_clearance import INPUT, configured
from tests.test_usercli_write_side import user_env  # noqa: F401 - fixture
from zen.cli.main import main
from zen.core.errors import ConfigError

READERS = [{"prefix": "gs://genomics-private", "tags": ["hipaa"], "readers": ["alice"]}]


def test_zen_submit_refusing_bound_data_does_not_point_at_zen_clusters(config, tmp_path, monkeypatch):
    """`zen submit`'s pre-check refuses Bob's job naming data whose readers are Alice, and points at data clearance's
    docs (it said "see `zen clusters`", which shows nothing of data_clearance)."""
    from zen.cli.kit import CliError
    from zen.cli.user import check_request
    from zen.core.models import JobRequest

    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(configured(config, READERS).model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    with pytest.raises(CliError) as refused:
        check_request(JobRequest.model_validate(job_request("gen-1", user_id="bob", inputs=INPUT)))
    message = str(refused.value)
    assert "may not name data under gs://genomics-private/" in message, message
    assert "zen clusters" not in message, message


def test_an_abbreviated_flag_with_a_dash_value_still_gets_the_hint(user_env, capsys):
    """argparse takes `--sinc` for `--since`; its message names `--since`, not the word typed: the hint still comes."""
    assert main(["usage", "--sinc", "-3d"]) == 2
    err = capsys.readouterr().err
    assert "expected one argument" in err and "=VALUE" in err, err


def test_package_still_refuses_a_notifier_key_of_another_project(tmp_path, monkeypatch):
    """scripts/package.py loads --config "rather than at the first event: the functions would refuse this file too",
    the notifier's secrets checked against the project Zen runs in (ZenConfig.for_project): packaged, every
    function's Zen.from_env (ZEN_PROJECT=my-project) would raise ConfigError on its first event."""
    spec = importlib.util.spec_from_file_location("package", ROOT / "scripts" / "package.py")
    package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)
    path = tmp_path / "zen.yaml"
    path.write_text(
        "project: my-project\nclusters: [{name: 1xl4, gpu_type: nvidia-l4, gpu_count: 1, machine_type: g2-standard-8,"
        " regions: [us-central1], max_vms_per_region: 2, max_vms: 2}]\nnotifications:\n  email: {api_key_secret: "
        "projects/other-project/secrets/zen-notify-sendgrid/versions/latest, sender: zen@example.com,"
        " recipients: ['*@example.com']}\n")
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.setenv("ZEN_PROJECT", "my-project")
    from zen.cli.kit import deployed_config

    with pytest.raises(ConfigError, match="api_key_secret"):
        deployed_config()  # what the functions and `zen submit` do with it
    with pytest.raises(ConfigError, match="api_key_secret"):
        package.build(tmp_path / "dist", path)
