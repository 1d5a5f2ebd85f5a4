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


@pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="no dual-stack IPv6 here")
def test_the_console_on_all_ipv6_addresses_still_answers_on_ipv4():
    app = Flask("console-dualstack")
    app.add_url_rule("/", "root", lambda: "up")
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::", 0))
        port = probe.getsockname()[1]
    bound = threading.Event()
    threading.Thread(target=serve, args=(app, "::", port, bound.set), daemon=True).start()
    assert bound.wait(10)
    assert urllib.request.urlopen(f"http://[::1]:{port}/", timeout=10).read() == b"up"
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read() == b"up"
