"""A local stack's ports and readiness: a wait for a port does not take a socket's connection to itself for
a listener, a wait for a process's word fails as soon as the process ends, and a stack refuses ports in the
kernel's ephemeral range, where any connection can take one first and a wait can connect to itself (a CI
run's stack on ports 35000-35012 never stored its two jobs)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from zen_dev.local.functions_server import listening
from zen_dev.local.stack import LocalStack, Ports, StackError, ephemeral_ports, wait_for_line


def bound() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def test_a_socket_connected_to_itself_is_not_a_listener():
    with bound() as itself:  # a connect from a port to that port: TCP simultaneous open, connected to itself
        port = itself.getsockname()[1]
        assert itself.connect_ex(("127.0.0.1", port)) == 0 and itself.getpeername() == itself.getsockname()
    probe = bound()
    assert not listening(probe.getsockname()[1], probe)

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert listening(server.getsockname()[1])


def test_a_stack_refuses_ports_in_the_ephemeral_range_and_says_which_base_to_pick(tmp_path):
    ephemeral = ephemeral_ports()
    stack = LocalStack(home=tmp_path / "stack", ports=Ports.from_base(ephemeral.start - 6))
    with pytest.raises(StackError) as refused:
        stack.up()
    message = str(refused.value)
    assert f"{ephemeral.start}-{ephemeral.stop - 1}" in message and f"{ephemeral.start - 6}" not in message
    assert f"below {ephemeral.start - 12}" in message
    assert not (tmp_path / "stack" / "logs").exists()  # refused before anything started
    assert max(Ports.from_base(ephemeral.start - 13).all().values()) < ephemeral.start


def test_a_wait_for_a_line_fails_at_once_when_its_process_ends_first(tmp_path):
    log = tmp_path / "bridge.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-c", "print('starting'); raise SystemExit(3)"], stdout=out)
    process.wait()
    with pytest.raises(StackError, match=r"bridge exited with 3 before saying 'event bridge:'; see .*bridge.log"):
        wait_for_line(log, "event bridge: ", 60, process)
    log.write_text("event bridge: 5 route(s)\n")
    wait_for_line(log, "event bridge: ", 1, process)  # said: returns, ended or not
    with pytest.raises(StackError, match="bridge exited with 3"):  # said by an earlier run: not this one's word
        wait_for_line(log, "event bridge: ", 60, process, after=log.stat().st_size)


def test_the_kernels_range_is_read_and_one_leaving_no_block_below_it_is_not_kept_to(tmp_path, monkeypatch):
    from zen_dev.local import stack

    for text, expected in (("32768\t60999\n", range(32768, 61000)), ("1024 65535\n", range(0)),
                           ("1037 65535\n", range(1037, 65536))):
        (tmp_path / "range").write_text(text)
        monkeypatch.setattr(stack, "EPHEMERAL_RANGE_FILE", tmp_path / "range")
        assert ephemeral_ports() == expected
