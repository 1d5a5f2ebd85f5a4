"""A gang's output (zen.cli.follow): `zen logs -f` (and `zen submit --wait`) reads an attempt until every
node's final entry, not the first node's; `zen logs JOB --node K` prints node K's lines alone."""

from __future__ import annotations

import io

from tests.messages import heartbeat, job_request
from zen.adapters.joblogs import OutputEntry
from zen.cli.follow import JobStatusSource, follow


def entry(vm: str, seq: int, text: str, final: bool = False) -> OutputEntry:
    return OutputEntry("g", 1, "stdout", vm, seq, "2026-11-29T10:00:00Z", text, final=final)


class TwoNodes:
    """vm-1's lines and final entry come in the first read, vm-2's in the second."""

    def __init__(self):
        self.batches = [[entry("vm-1", 1, "rank 0 says hi"), entry("vm-1", 2, "", final=True)],
                        [entry("vm-2", 1, "rank 1 says hi"), entry("vm-2", 2, "", final=True)]]

    def new_entries(self, job_id, attempt=None):
        return self.batches.pop(0) if self.batches and attempt == 1 else []


def run_gang(functions):
    functions.submit(job_request("g", nodes=2))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip="127.0.0.1"))
    for vm in ("vm-1", "vm-2"):
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
        functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm=vm, exit_code=0))


def test_following_a_gang_reads_every_nodes_output_to_its_end(functions, zen):
    run_gang(functions)
    out = io.StringIO()
    code = follow("g", TwoNodes(), JobStatusSource(zen.db), out=out, err=io.StringIO(), poll_s=0.01,
                  settle_s=0.0, appear_timeout_s=2.0)
    assert code == 0
    assert "rank 0 says hi" in out.getvalue() and "rank 1 says hi" in out.getvalue()


def test_zen_logs_node_prints_one_nodes_lines(functions, zen, tmp_path, monkeypatch, capsys):
    from zen.cli.main import main

    run_gang(functions)
    attempt = tmp_path / "g" / "attempt-1.jsonl"
    attempt.parent.mkdir(parents=True)
    attempt.write_text("".join(e.to_json() + "\n" for batch in TwoNodes().batches for e in batch))
    monkeypatch.setenv("ZEN_JOB_LOGS_DIR", str(tmp_path))
    assert main(["logs", "g", "--node", "1", "--raw"]) == 0
    assert capsys.readouterr().out.split() == ["rank", "1", "says", "hi"]
    assert main(["logs", "g"]) == 0  # every node's, each line with its VM
    shown = capsys.readouterr().out
    assert "vm-1" in shown and "vm-2" in shown
    assert main(["logs", "g", "--node", "5"]) == 2
    assert "has no node 5" in capsys.readouterr().err
