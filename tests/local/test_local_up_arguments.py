"""`zen local up` with a mistyped argument says what to fix, before it starts anything: a `--base-port` whose block of
13 ports runs past 65535 failed deep in a socket's bind (`zen: OverflowError: bind(): port must be 0-65535.`), and a
`--config` file that does not exist was told to "(set ZEN_CONFIG)", which the user had not used."""

from __future__ import annotations

from zen.cli.main import main


def test_a_base_port_whose_block_runs_past_65535_is_a_usage_error_naming_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["local", "up", "--base-port", "65530"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--base-port" in err and "65523" in err, err
    assert "OverflowError" not in err, err
    assert not (tmp_path / ".zen" / "stack.json").exists()


def test_a_base_port_that_is_no_number_is_said_as_argparse_says_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["local", "up", "--base-port", "abc"]) == 2
    assert "invalid int value: 'abc'" in capsys.readouterr().err


def test_a_missing_config_file_given_with_the_flag_is_not_told_to_set_zen_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZEN_CONFIG", raising=False)
    code = main(["local", "up", "--config", "my.yaml", "--base-port", "19000"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "my.yaml does not exist" in err, err
    assert "set ZEN_CONFIG" not in err, err
    assert not (tmp_path / ".zen" / "stack.json").exists()


def test_a_missing_config_file_named_by_zen_config_is_told_to_check_zen_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZEN_CONFIG", "my.yaml")  # read as the stack starts, not at import
    code = main(["local", "up", "--base-port", "19000"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "my.yaml does not exist (check ZEN_CONFIG, which names it)" in err, err
    assert not (tmp_path / ".zen" / "stack.json").exists()
