"""``make demo`` (``zen demo``) on a machine where one of its fixed ports (8185-8197) is taken, e.g. by ComfyUI on
8188 or a demo still running: it said ``zen: StackError: port(s) taken: 8188 (billing stand-in); free them or pick
others with --base-port (set ZEN_DEBUG=1 to see where)``. ``zen demo`` had no --base-port (a usage error), so the
one way out it named did not exist, and the "unexpected error" form (the class name, ZEN_DEBUG) was given to an
expected refusal. ``zen demo --base-port`` (``make demo DEMO_ARGS='--base-port N'``) exists now, and the refusal
is one line."""

from __future__ import annotations

import socket

from zen.cli.main import main
from zen_dev.local.stack import Ports, port_free

DEMO_PORTS = Ports.from_base(8185)


def test_a_taken_demo_port_is_refused_with_a_way_out_that_exists(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    held = socket.socket()
    try:
        if port_free(DEMO_PORTS.billing):
            held.bind(("127.0.0.1", DEMO_PORTS.billing))
            held.listen()
        code = main(["demo"])
    finally:
        held.close()
    err = capsys.readouterr().err
    assert code == 1, err
    assert "taken" in err, err
    assert "StackError" not in err and "ZEN_DEBUG" not in err, err  # an expected refusal, not an unexpected error
    assert "--base-port" in err, err  # the way out it names exists:
    assert main(["demo", "--help"]) == 0 and "--base-port" in capsys.readouterr().out
