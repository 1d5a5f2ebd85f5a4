"""A `zen submit --job-id X` whose publish fails because Google refuses the credentials publishes nothing: it must
not leave X recorded as "being published right now" (zen.cli.submitted), or the submit the user makes once the
login is renewed is refused ("... one job runs ... Not published") and no job ever runs."""

from __future__ import annotations

import json
import os

from tests.test_cli_deployed_messages import _zen, revoked_credentials  # noqa: F401 - the fixture


def test_a_refused_publish_forgets_the_chosen_id(tmp_path, revoked_credentials, cli_forks):  # noqa: F811
    argv = ("submit", "--image", "busybox", "--cluster", "1xl4", "--job-id", "mine-1", "--", "true")
    first = _zen(cli_forks, tmp_path, *argv, GOOGLE_APPLICATION_CREDENTIALS=revoked_credentials)
    assert first.returncode == 1 and "Google refused your credentials" in first.stderr, first.stderr
    journal = os.path.join(os.environ["XDG_CACHE_HOME"], "zen", "submitted.json")
    recorded = json.load(open(journal)) if os.path.exists(journal) else {}
    again = _zen(cli_forks, tmp_path, *argv, GOOGLE_APPLICATION_CREDENTIALS=revoked_credentials)
    assert "is being published by another `zen submit`" not in again.stderr, (recorded, again.stderr)
    assert not any("mine-1" in rows for rows in recorded.values()), recorded
