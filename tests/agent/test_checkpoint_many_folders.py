"""A checkpoint folder of many folders is listed whole, however few descriptors the agent may hold: each folder's
subfolders were all opened before any was read, so one of more folders than the agent's open-file limit (1,024 by
default under systemd) failed every save as unreadable, and told the job to chmod what it may read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zen

LISTS = """
import resource, sys
from pathlib import Path
from zen.agent import checkpoint_files
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
found = checkpoint_files.listing(Path(sys.argv[1]), set(), print)
print(len(found.files))
"""


def test_a_folder_of_more_folders_than_open_files_allowed_is_saved_whole(tmp_path: Path) -> None:
    top = tmp_path / "checkpoint"
    for step in range(100):  # a folder per step kept, each with its shard
        (top / f"step-{step:04d}" / "inner").mkdir(parents=True)
        (top / f"step-{step:04d}" / "inner" / "shard.pt").write_bytes(b"w")
    shared = str(Path(zen.__file__).parent.parent)
    ran = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {shared!r})\n{LISTS}", str(top)],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-600:]
    assert ran.stdout.split() == ["100"]
