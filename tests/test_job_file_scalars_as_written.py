"""A job file's scalars reach the job as its user wrote them, or are refused naming the field.

PyYAML reads YAML 1.1, where ``1:30`` is the sexagesimal 90 and ``010`` the octal 8: ``max_runtime_s: 1:30``
(an hour and a half, to its user) stopped the job after 90 seconds and ``priority: 010`` ranked it 8, without a
word. Zen reads both as text (as YAML 1.2 does not read them as those numbers): a number field refuses them, and
a text field (env, command) takes them as written. A number where text is meant is refused with the advice to
quote it, not coerced."""

from __future__ import annotations

import pytest

from zen.cli.kit import CliError
from zen.cli.main import build_parser
from zen.cli.user import build_request
from zen.core.documents import load_yaml


def request_of(tmp_path, text: str):
    job = tmp_path / "job.yaml"
    job.write_text("cluster: 1xl4\nuser_id: alice\n" + text)
    return build_request(build_parser().parse_args(["submit", str(job)]))


@pytest.mark.parametrize("text, field", [
    ("command: [python, train.py]\nmax_runtime_s: 1:30\n", "max_runtime_s"),
    ("command: [python, train.py]\npriority: 010\n", "priority"),
    ("command: [python, train.py]\nmax_attempts: 1:00\n", "max_attempts"),
])
def test_a_sexagesimal_or_leading_zero_number_is_refused_not_read_as_another(tmp_path, text, field):
    with pytest.raises(CliError) as refused:
        request_of(tmp_path, text)
    assert refused.value.code == 2 and field in str(refused.value), str(refused.value)


def test_text_fields_keep_sexagesimal_and_leading_zero_values_as_written(tmp_path):
    request = request_of(tmp_path, "command: [python, train.py, --seed, 010, --warmup, 1:30]\n"
                                   "env:\n  ZIP: 01234\n  TIME: '12:30'\n  AT: 12:30\n")
    assert request.command == ["python", "train.py", "--seed", "010", "--warmup", "1:30"]
    assert request.env == {"ZIP": "01234", "TIME": "12:30", "AT": "12:30"}


@pytest.mark.parametrize("text, field, value", [
    ("command: [python, train.py]\nenv:\n  VERSION: 1.10\n", "env.VERSION", "1.1"),
    ("command: [python, train.py, --lr, 0.10]\n", "command.3", "0.1"),
    ("command: [python, train.py]\nenv:\n  NAME: ~\n", "env.NAME", "None"),
    ("command: [python, train.py]\nlabels:\n  team: 7\n", "labels.team", "7"),
])
def test_a_number_or_null_where_text_is_meant_is_refused_with_the_advice_to_quote_it(tmp_path, text, field, value):
    with pytest.raises(CliError) as refused:
        request_of(tmp_path, text)
    said = str(refused.value)
    assert f"{field}: text is meant" in said and "in quotes" in said and f"not {value}" not in said, said


def test_yaml_1_1_sexagesimal_and_octal_are_text_and_other_numbers_are_numbers():
    loaded = load_yaml("a: 1:30\nb: 010\nc: -0:30\nd: 1:30.5\ne: 10\nf: 0x1F\ng: 1.5\nh: 0\ni: 0.5\nj: 1_000\nk: -7\n")
    assert loaded == {"a": "1:30", "b": "010", "c": "-0:30", "d": "1:30.5", "e": 10, "f": 31, "g": 1.5, "h": 0,
                      "i": 0.5, "j": 1000, "k": -7}
