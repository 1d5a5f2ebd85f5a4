"""The console binds its own socket (zen.console.serve) and hands it to werkzeug: on an IPv6 host (`zen console --host
::`) it answers IPv4 too (127.0.0.1, a browser's `localhost`), as werkzeug's own bind did; bound IPv6-only, it
did not."""

from __future__ import annotations

import socket
import threading
import urllib.request

import pytest
from flask import Flask

from zen.console.serve import serve


def _served(host: str, probe_family: int, probe_host: str) -> int:
    """A console app served on ``host`` at a free port (the port ``probe_host`` had free), once bound."""
    app = Flask("console-serve")
    app.add_url_rule("/", "root", lambda: "up")
    with socket.socket(probe_family) as probe:
        probe.bind((probe_host, 0))
        port = probe.getsockname()[1]
    bound = threading.Event()
    threading.Thread(target=serve, args=(app, host, port, bound.set), daemon=True).start()
    assert bound.wait(10)
    return port


def test_the_console_serves_once_its_address_is_bound():
    """It binds its address itself (so a taken port is one line) and hands it to werkzeug: it serves."""
    port = _served("127.0.0.1", socket.AF_INET, "127.0.0.1")
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read() == b"up"


@pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="no dual-stack IPv6 here")
def test_the_console_on_all_ipv6_addresses_still_answers_on_ipv4():
    port = _served("::", socket.AF_INET6, "::")
    assert urllib.request.urlopen(f"http://[::1]:{port}/", timeout=10).read() == b"up"
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read() == b"up"
