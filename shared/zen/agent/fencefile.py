"""The file whose existence powers the VM off (``zen-fence.path``, written by the startup script): the agent's fence
(``zen.agent.leftover.fence_vm``) and the job's supervisor (``zen.agent.launch``) write it. Standard library only
(the supervisor loads it from its file)."""

import contextlib
import os
import threading


def add_reason(path: str, reason: str) -> None:
    """Add ``reason`` as a line of ``path``. The file appears whole: written under another name, then linked to
    ``path`` (which fails if it exists); the root unit starts as soon as the path exists and copies the file to the
    journal, and a file still being written (opened, its line not yet in) gave the journal nothing. A file that exists
    already (another reason, the agent's or the supervisor's, maybe at the same moment) has the line appended: one
    already whole, whose unit has started. Raises ``OSError``."""
    line = reason + "\n"
    staged = f"{path}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(staged, "w") as out:
            out.write(line)
        try:
            os.link(staged, path)
            return
        except FileExistsError:
            pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)
    with open(path, "a") as out:
        out.write(line)
