"""What ``python -m zen.agent`` loads before its loop: the Pub/Sub client (with gRPC and google-auth, about 0.3 s of
CPU of the agent's 0.5 s start on 2 cores) only once the loop is about to run, so ``zen agent --check`` and a start
refused before the loop (configuration, identity) never load it."""

from __future__ import annotations

import subprocess
import sys


def test_the_agents_entry_point_loads_no_cloud_client_before_its_loop():
    code = ("import sys; import zen.agent.__main__; "
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' "
            "or m.startswith(('google.cloud.', 'google.api_core', 'google.auth', 'google.pubsub')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"zen.agent.__main__ pulls in {out}"
