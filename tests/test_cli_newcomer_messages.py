"""What a new user meets in `zen` (through ``zen.cli.main``, the Pub/Sub stand-in and the real Postgres):

- `zen stop later-1` of an id no job has is refused (not sent, exit 1), yet it says "Zen keeps the stop for 7 days:
  a job submitted with that id in that time is cancelled when it arrives": a job then submitted with that id runs.
- `zen --json jobs list` says "unrecognized arguments: --json", a flag `zen jobs list` has: it is in the wrong place.
- A job file that is not YAML says only the parser's first line ("while scanning for the next token"): no line, no
  problem.
- `zen submit job.YAML` takes the file's name as the job's command ("give a cluster ...").
- `zen console` on a port already taken prints its address as if it served, then werkzeug's lines, not one `zen:` line.
- `zen submit --cluster C examples/` (a path to a directory) published a job whose command was the directory: it could
  only fail.
- A job given no cluster said "invalid job request: (message): give a cluster ...".
- `zen submit job.yaml --gpu-count 4`, the file naming its cluster, said "job.yaml: give a cluster, ...": the flag
  had replaced the file's whole GPU shape (its cluster too), and the message blamed the file.
- A job file's mistyped top-level field named the field meant (`comand`: "did you mean command?"), one inside a
  mapping (`checkpoint: {evry: 600}`, an input's `siz_gb`) only "Extra inputs are not permitted".
- `zen submit --max-runtime 10m` said "invalid int value: '10m'" (`--since` takes 10m; the job file's field says "of
  seconds"), not that the flag counts seconds.
"""

from __future__ import annotations

import socket

import pytest

from tests.test_usercli_write_side import user_env  # noqa: F401 - fixture
from zen.cli.main import main


def test_a_refused_stop_of_an_unknown_id_does_not_say_the_stop_is_kept(user_env, capsys):
    assert main(["stop", "later-1"]) == 1
    err = capsys.readouterr().err
    assert user_env.on("zen-job-stop") == []
    assert "not sent" in err and "a job submitted with that id in that time is cancelled" not in err.split("--force")[0], err


def test_a_commands_flag_before_the_command_is_not_called_unrecognized(user_env, capsys):
    assert main(["--json", "jobs", "list"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --json" not in err and "jobs list --json" in err, err


def test_a_job_file_that_is_not_yaml_names_the_line_and_the_problem(user_env, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("cluster: 1xl4\n\tcommand: [python, -c, '1']\n")
    assert main(["submit", str(job)]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and ("\\t" in err or "tab" in err), err


def test_a_job_file_with_an_upper_case_suffix_is_read_as_a_job_file(user_env, tmp_path, capsys):
    job = tmp_path / "job.YAML"
    job.write_text("cluster: 1xl4\ncommand: [python, -c, '1']\n")
    code = main(["submit", str(job)])
    out, err = capsys.readouterr()
    assert code == 0 and len(user_env.on("zen-job-submitted")) == 1, (out, err)


def test_the_console_on_a_taken_port_says_so_in_one_line(user_env, capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        code = main(["console", "--port", str(taken.getsockname()[1])])
    finally:
        taken.close()
    out, err = capsys.readouterr()
    assert code == 1 and "Zen console: http" not in out, (out, err)
    assert [line for line in err.splitlines() if line.strip()] and all(
        line.startswith("zen: ") for line in err.splitlines() if line.strip()), err


def test_a_directory_is_neither_a_job_file_nor_a_program(user_env, tmp_path, capsys):
    """A path to a folder here (`zen submit --cluster C examples/`) would publish a job that could only fail; a bare
    word that is also a folder here may be the image's program (tests/test_submit_program_named_as_a_folder.py)."""
    assert main(["submit", "--cluster", "1xl4", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a directory, not a job file" in err and user_env.on("zen-job-submitted") == [], err


def test_a_problem_of_the_whole_request_names_no_field(user_env, capsys):
    assert main(["submit", "--image", "python:3.11"]) == 2
    err = capsys.readouterr().err
    assert "give a cluster" in err and "(message)" not in err, err


def test_a_value_starting_with_a_dash_says_how_to_give_it(user_env, capsys):
    """argparse reads `--since -3d`'s value as a flag and says none was given: the line says how to give it."""
    assert main(["usage", "--since", "-3d"]) == 2
    err = capsys.readouterr().err
    assert "--since=VALUE" in err, err
    assert main(["usage", "--since"]) == 2  # no value at all: no such hint
    err = capsys.readouterr().err
    assert "expected one argument" in err and "--since=VALUE" not in err, err


def test_a_gpu_count_alone_over_a_job_file_names_the_flag_not_the_file(user_env, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("cluster: 1xl4\ncommand: [python, -c, '1']\n")
    assert main(["submit", str(job), "--gpu-count", "4"]) == 2
    err = capsys.readouterr().err
    assert "give a cluster" not in err and "--gpu-count replaces" in err and "--gpu-type" in err, err
    assert user_env.on("zen-job-submitted") == [], err


@pytest.mark.parametrize("with_file", [True, False])
def test_cluster_and_gpu_flags_together_are_named_as_the_flags_clash(user_env, tmp_path, capsys, with_file):
    """Over a job file that names its cluster, the request's own error was given as the file's
    ("job.yaml: give either a cluster or gpu_count with gpu_type, not both")."""
    job = tmp_path / "job.yaml"
    job.write_text("cluster: 1xl4\ncommand: [python, -c, '1']\n")
    argv = ["submit", *([str(job)] if with_file else []), "--cluster", "1xl4", "--gpu-type", "nvidia-l4",
            "--gpu-count", "1", *([] if with_file else ["--", "python", "-c", "1"])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--cluster and --gpu-type/--gpu-count each give the GPU shape" in err and "job.yaml" not in err, err
    assert user_env.on("zen-job-submitted") == [], err


@pytest.mark.parametrize("field, meant", [("checkpoint: {evry: 600}", "checkpoint.every"),
                                          ("array: {count: 2, max_paralel: 1}", "array.max_parallel"),
                                          ("inputs: [{uri: 'gs://my-data/a', siz_gb: 3}]", "inputs.0.size_gb")])
def test_a_mistyped_field_inside_a_mapping_is_told_the_field_it_is_closest_to(user_env, tmp_path, capsys, field, meant):
    job = tmp_path / "job.yaml"
    job.write_text(f"cluster: 1xl4\ncommand: [python, -c, '1']\n{field}\n")
    assert main(["submit", str(job)]) == 2
    err = capsys.readouterr().err
    assert f"(did you mean {meant}?)" in err, err
    assert user_env.on("zen-job-submitted") == [], err


@pytest.mark.parametrize("flag, given, said", [("--max-runtime", "10m", "'10m' is not a whole number of seconds (10m is 600)"),
                                               ("--retry-backoff", "1h", "'1h' is not a whole number of seconds (1h is 3600)"),
                                               ("--checkpoint-every", "often", "'often' is not a whole number of seconds")])
def test_a_seconds_flag_given_an_age_says_it_counts_seconds(user_env, capsys, flag, given, said):
    assert main(["submit", "--cluster", "1xl4", flag, given, "--", "python", "-c", "1"]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {said}" in err and "invalid int value" not in err, err
    main(["submit", "--cluster", "1xl4", flag, "600", "--", "python", "-c", "1"])  # a number is read as before
    err = capsys.readouterr().err
    assert f"argument {flag}" not in err, err
