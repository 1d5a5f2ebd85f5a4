"""A job's own flags given without the ``--`` before its command: the usage error says where the command goes, even
when one of those flags is spelled like one of ``zen submit``'s (``--max-steps``, ``--regions``): it is the job's,
not a mistyped flag of Zen's. A mistyped flag before the command is still told the flag it is closest to."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("job_flag", ["--max-steps", "--regions", "--labels"])
def test_a_jobs_flag_close_to_a_zen_flag_after_its_command_is_told_the_command_goes_after_double_dash(capsys,
                                                                                                      job_flag):
    from zen.cli.main import main

    assert main(["submit", "--cluster", "1xl4", "python", "train.py", job_flag, "5"]) == 2
    err = capsys.readouterr().err
    assert f"a job's command goes after --: zen submit ... -- python train.py {job_flag} 5" in err, err
    assert "did you mean" not in err, err


def test_a_mistyped_flag_before_the_command_is_told_the_flag_it_is_closest_to(capsys):
    from zen.cli.main import main

    assert main(["submit", "--clustr", "1xl4", "--", "python", "train.py"]) == 2
    assert "(did you mean --cluster?)" in capsys.readouterr().err


def test_a_mistyped_flag_after_a_job_file_is_told_the_flag_it_is_closest_to(capsys, tmp_path):
    from zen.cli.main import main

    job = tmp_path / "job.yaml"
    job.write_text("command: [python, train.py]\n")
    assert main(["submit", str(job), "--clustr", "1xl4"]) == 2
    assert "(did you mean --cluster?)" in capsys.readouterr().err
