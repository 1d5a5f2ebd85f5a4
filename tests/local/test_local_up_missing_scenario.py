"""``zen local up --scenario FILE`` with a mistyped path (or a scenario that is not valid YAML): the Compute
stand-in says exactly what is wrong in .zen/logs/compute.log ("cannot read the scenario: No such file or
directory"), but ``zen local up`` printed only ``zen: RuntimeError: process exited with 2 before listening on
PORT (set ZEN_DEBUG=1 to see where)``: no stand-in named, no log, no file, and the "unexpected error" form. The
stack's waits for a port name the process, its last word and its log now (``LocalStack._listening``)."""

from __future__ import annotations

from tests.stack_support import free_base_port, home  # noqa: F401 - the fixture

from zen.cli.main import main


def test_a_mistyped_scenario_path_is_named_with_the_stand_in_and_its_log(home, monkeypatch, capsys):
    monkeypatch.chdir(home)
    code = main(["local", "up", "--base-port", str(free_base_port(start=28700)), "--scenario", "scenaro.yaml"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "RuntimeError" not in err and "ZEN_DEBUG" not in err, err  # not the form of an unexpected error
    assert "compute" in err and ("scenaro.yaml" in err or "compute.log" in err), err
    assert not (home / ".zen" / "stack.json").exists()
