"""`zen submit ... WORD` where WORD is also a folder of the submitter's current one: the job runs on a VM, in its --image
container when one is given, where a program of that name (a package's console script, submitted from the package's
checkout, which holds a folder of the same name) runs fine. Only a path to a folder is refused."""

from __future__ import annotations


from tests.test_usercli_write_side import user_env  # noqa: F401 - fixture
from zen.cli.main import main


def test_an_images_program_named_as_a_local_folder_is_submitted(user_env, tmp_path, monkeypatch, capsys):
    (tmp_path / "mytrain").mkdir()  # the package's source, in the checkout the user submits from
    monkeypatch.chdir(tmp_path)
    code = main(["submit", "--cluster", "1xl4", "--image", "ghcr.io/me/mytrain:1", "mytrain"])
    out, err = capsys.readouterr()
    assert code == 0 and len(user_env.on("zen-job-submitted")) == 1, (out, err)
