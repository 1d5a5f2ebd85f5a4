"""``--after-any`` is a switch for ``--after``'s jobs (docs/how-to/arrays-and-pipelines.md), but reads like Slurm's
``afterany:ID``: ``zen submit --after-any train --cluster C -- python eval.py`` took ``train`` as the start of the
command (``train python eval.py``, a job that fails on its VM had ``--after`` been given too), and without ``--after``
was refused as ``after_condition needs after``, a field the command line never named. Both now say how to write it,
before anything is published."""

from __future__ import annotations


def test_a_job_id_given_to_after_any_is_refused_naming_after(capsys):
    from zen.cli.main import main

    assert main(["submit", "--after", "prep", "--after-any", "train", "--cluster", "1xl4", "--",
                 "python", "eval.py"]) == 2
    err = capsys.readouterr().err
    assert ("--after-any takes no job id (train would start the command): name the jobs with --after, then add the "
            "switch: zen submit --after train --after-any ... -- python eval.py") in err, err


def test_after_any_without_after_says_to_name_the_jobs_with_after(capsys):
    from zen.cli.main import main

    assert main(["submit", "--after-any", "--cluster", "1xl4", "--", "python", "eval.py"]) == 2
    err = capsys.readouterr().err
    assert "--after-any needs the jobs to wait for: zen submit --after ID --after-any ... -- COMMAND" in err, err


def test_after_any_with_a_job_files_after_is_read_as_its_switch(tmp_path):
    """A job file's ``after:`` names the jobs: ``--after-any`` beside it needs no ``--after``."""
    from zen.cli.main import build_parser
    from zen.cli.user import build_request

    job = tmp_path / "eval.yaml"
    job.write_text("cluster: 1xl4\nafter: [train]\ncommand: [python, eval.py]\n")
    request = build_request(build_parser().parse_args(["submit", str(job), "--after-any"]))
    assert (request.after, request.after_condition) == (["train"], "any")


def test_a_command_given_around_the_double_dash_is_kept_with_after_any():
    """``zen submit --after prep --after-any --cluster C python eval.py -- --lr 1``: the words after ``--`` are the
    program's flags, the rest of the command begun before it (``python eval.py --lr 1``), as without the switch; no
    job id was given to ``--after-any`` (a program after ``--`` is what such an id is taken before)."""
    from zen.cli.main import build_parser
    from zen.cli.user import build_request

    args = build_parser().parse_args(["submit", "--after", "prep", "--after-any", "--cluster", "1xl4", "python",
                                      "eval.py"])
    args.trailing = ["--lr", "1"]  # the words after -- (zen.cli.main cuts them off before parsing)
    request = build_request(args)
    assert (request.command, request.after, request.after_condition) == (
        ["python", "eval.py", "--lr", "1"], ["prep"], "any"), request
