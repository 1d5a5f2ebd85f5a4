"""The console names the project it shows as terraform deploys it: ZEN_PROJECT (console.tf sets it), over the
configuration file's ``project``, as the functions take it (``Zen.from_env``: ``ZenConfig.for_project``). Deployed
without a configuration of one's own (zen_config_file unset), the file is the package's default, whose project is
``zen-local``: every page's title named that project, not the one the console reads."""

from __future__ import annotations

from zen.core.config import load_config


def test_the_console_names_the_project_zen_project_gives(db_url, monkeypatch):
    from zen.console.serve import from_env

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)  # Database.from_env reads the process's environment
    deployed = "acme-ml-prod"
    assert load_config().project != deployed
    app = from_env({"ZEN_DATABASE_URL": db_url, "ZEN_PROJECT": deployed}, local=True)
    answer = app.test_client().get("/jobs")
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200, html
    assert f"Zen console · {deployed}</title>" in html, html[:400]
