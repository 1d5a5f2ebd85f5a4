"""A journal write the disk refuses part way (``zen.agent.journal``): the temp file it was writing was left behind, an
inode and what it held, until the next agent's start removed it. On a full disk the attempt's mark is written again at
every report of an upload (``Journal.renewed``): one more left every heartbeat period, for as long as the upload took.
The disk's refusal is real: the writing process may write no file past 64 bytes (``RLIMIT_FSIZE``), so each record's
write fails after its temp file is made, as on a disk whose last blocks ran out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from zen.agent import journal

WRITES = """
import resource, signal, sys
from datetime import datetime, timezone
sys.path.insert(0, sys.argv[1])
from zen.agent.journal import Journal
from zen.core.models import AgentStatus, Heartbeat

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as ENOSPC would
kept = Journal(sys.argv[2], "vm-a")
kept.dir.mkdir(parents=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
kept.running("j1", 1)
report = Heartbeat(job_id="j1", attempt=1, vm="vm-a", region="us-central1", zone="us-central1-a",
                   status=AgentStatus.SUCCEEDED, seq=1, sent_at=datetime.now(timezone.utc), exit_code=0)
kept.keep(report).done(False)
"""


def test_a_journal_write_the_disk_refused_leaves_no_temp_file(tmp_path):
    shared = str(Path(journal.__file__).parents[2])
    done = subprocess.run([sys.executable, "-c", WRITES, shared, str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "not journaled" in done.stderr and "not marked" in done.stderr, done.stderr  # the writes were refused
    assert os.listdir(tmp_path / journal.JOURNAL_DIR / "vm-a") == []
